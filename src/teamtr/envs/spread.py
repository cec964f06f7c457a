"""MPE simple_spread behind the World protocol: N agents must cover N landmarks.

The physics, rewards and landmark layout are the ``mpe2`` package's ``simple_spread_v3`` parallel
env (PettingZoo API). A directive assigns one agent to one landmark ("agent_2: cover landmark 0");
the role agent's controller steers there with the env's five discrete actions. Two agents sent
to one landmark is a ``conflict``; so is a collision of two agents (the env's own -1 penalty).
"""

from __future__ import annotations

import itertools
import math

from teamtr.core import NOOP, AgentView, Directive, Event, Outcome, TeamTRError
from teamtr.envs.registry import check_float, check_int

INSTALL_HINT = "pip install 'teamtr[mpe]'"

#: Our action names, indexed like the env's discrete actions.
ACTIONS: tuple[str, ...] = ("stay", "left", "right", "down", "up")
_PUSH = ((0.0, 0.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0))
COVER_RADIUS = 0.1  # the env's own capture radius (Scenario.CAPTURE_RADIUS)
# MPE physics (mpe2 core.World): pos += vel*dt; vel = vel*(1-damping) + accel*dt, accel 5.
_DT, _KEEP, _KICK = 0.1, 0.75, 0.5


class SpreadWorld:
    """``N`` agents (``agent_0``..), ``N`` landmarks, ``horizon`` ticks (the env's ``max_cycles``).

    Options: ``N`` (2-6, default 3), ``horizon`` (default 25, the env's default), ``decision_every``
    (default 5), ``local_ratio`` (the env's collision-penalty weight, default 0.5).
    ``tick_reward`` after each step: the env's reward averaged over agents (the shared global part
    is -sum over landmarks of the nearest agent's distance). Outcome ``success``: every landmark
    covered (an agent within 0.1) at the end. At the end one ``covered_at_end`` event per covered
    landmark: the headline metric ``landmarks_covered`` (0..N per episode) counts them.
    """

    name = "spread"
    team_size_option = ("N", 3)
    vocabulary_option = None
    headline_metrics = {"landmarks_covered": "covered_at_end"}  # landmarks with an agent on them at the end

    def __init__(self, N: int = 3, horizon: int = 25, decision_every: int = 5, local_ratio: float = 0.5) -> None:
        check_int(self.name, "N", N, 2, 6)
        check_int(self.name, "horizon", horizon, 1, 100_000)
        check_int(self.name, "decision_every", decision_every, 1, 100_000)
        local_ratio = check_float(self.name, "local_ratio", local_ratio, 0.0, 1.0)
        try:
            from mpe2 import simple_spread_v3
        except ImportError as exc:
            raise TeamTRError(f"The spread world needs the 'mpe2' package ({exc}). Run: {INSTALL_HINT}") from None
        self.N, self.horizon, self.decision_every = N, horizon, decision_every
        self.env = simple_spread_v3.parallel_env(
            N=N, max_cycles=horizon, local_ratio=local_ratio, continuous_actions=False
        )
        self.agents = [f"agent_{i}" for i in range(N)]
        self.task = (
            f"{N} agents must spread out so that every one of the {N} landmarks has an agent on it "
            f"by the end ({horizon} ticks), without bumping into each other. Positions are (x, y) in "
            "[-1, 1]. Send each agent to a different landmark, the nearer the better."
        )
        self.reset(0)

    # ----------------------------------------------------------------------------------- episode
    def reset(self, seed: int) -> None:
        self.env.reset(seed=seed)
        self.world = self.env.unwrapped.world
        self.t, self.tick_reward, self.collisions = 0, 0.0, 0
        # The directive each agent steered by in the last plan() (None: nearest landmark), the
        # agents ever given one this episode, and who arrived on its landmark in the last tick.
        self.in_force: dict[str, Directive | None] = {a: None for a in self.agents}
        self.given: dict[str, Directive] = {}  # the last directive each agent steered by
        self.arrived: set[str] = set()
        self._covered = self.covered()
        self._clash: set[int] = set()
        self._stacked: set[int] = set()
        self._on: set[str] = set()

    def _pos(self, i: int) -> tuple[float, float]:
        p = self.world.agents[i].state.p_pos
        return float(p[0]), float(p[1])

    def _lm(self, j: int) -> tuple[float, float]:
        p = self.world.landmarks[j].state.p_pos
        return float(p[0]), float(p[1])

    def dist(self, i: int, j: int) -> float:
        (x, y), (a, b) = self._pos(i), self._lm(j)
        return math.hypot(x - a, y - b)

    def covered(self) -> list[int]:
        """Indices of the landmarks with an agent within the capture radius now."""
        return [j for j in range(self.N) if min(self.dist(i, j) for i in range(self.N)) < COVER_RADIUS]

    def outcome(self) -> Outcome | None:
        if self.t < self.horizon:
            return None
        return "success" if len(self.covered()) == self.N else "failure"

    def truncated(self) -> bool:
        """At the horizon (MPE's max cycles): the reward is per tick, so the end is a cut."""
        return self.t >= self.horizon

    # ---------------------------------------------------------------------------------- texts
    def describe(self) -> str:
        """One line per landmark and agent (positions to 0.1), then the coverage summary."""
        lines = [f"landmark {j} at ({x:.1f},{y:.1f})" for j, (x, y) in enumerate(map(self._lm, range(self.N)))]
        for i, agent in enumerate(self.agents):
            x, y = self._pos(i)
            d = self.given.get(agent)
            goal = f" -> landmark {d.task.split(':')[1]}" if d is not None else ""
            lines.append(f"{agent} at ({x:.1f},{y:.1f}){goal}")
        lines.append(f"Covered {len(self.covered())}/{self.N}, {self.horizon - self.t} ticks left.")
        return "\n".join(lines)

    def view(self, agent: str) -> AgentView:
        return AgentView(agent=agent, text=self.describe(), actions=ACTIONS)

    # ----------------------------------------------------------------------------- directives
    def directives(self) -> list[Directive]:
        """Every (agent, landmark) assignment: N*N candidates."""
        return [self._directive(a, j) for a in self.agents for j in range(self.N)]

    @staticmethod
    def _directive(agent: str, j: int) -> Directive:
        return Directive(text=f"{agent}: cover landmark {j}", target=agent, task=f"cover:{j}", kind="allocate")

    def _landmark(self, directive: Directive) -> int | None:
        head, _, tail = directive.task.partition(":")
        if head != "cover" or not tail.isdigit() or int(tail) >= self.N:
            return None
        return int(tail)

    def check(self, agent: str, directive: Directive) -> str | None:
        if agent not in self.agents:
            return f"{agent!r} is not an agent here; agents: {', '.join(self.agents)}"
        if directive.target != agent:
            return f"the directive is for {directive.target}, not {agent}"
        if self._landmark(directive) is None:
            return f"unknown task {directive.task!r}; expected cover:<landmark 0..{self.N - 1}>"
        return None

    def done(self, agent: str, directive: Directive) -> bool:
        """True for the tick right after ``agent`` arrived on the directive's landmark."""
        return agent in self.arrived and self.in_force[agent] == directive

    def plan(self, agent: str, directive: Directive | None) -> str:
        """Steer to the directive's landmark; ``None``: to the nearest landmark (no coordination)."""
        self.in_force[agent] = directive
        if directive is not None:
            self.given[agent] = directive
        i = self.agents.index(agent)
        j = self._landmark(directive) if directive is not None else None
        if j is None:
            j = min(range(self.N), key=lambda k: self.dist(i, k))
        return ACTIONS[self._steer(i, self._lm(j))]

    def _steer(self, i: int, goal: tuple[float, float]) -> int:
        """The action whose predicted position at the episode's end lies nearest ``goal``.

        With no later push an agent still travels vel*dt*(1 - keep^R)/(1 - keep) over the R ticks
        left, so pushing early overshoots: this one-step look-ahead brakes in time.
        """
        (x, y), v = self._pos(i), self.world.agents[i].state.p_vel
        left = self.horizon - self.t - 1
        coast = _DT * (1 - _KEEP**left) / (1 - _KEEP)
        best, best_err = 0, math.inf
        for a, (ux, uy) in enumerate(_PUSH):
            vx, vy = _KEEP * v[0] + _KICK * ux, _KEEP * v[1] + _KICK * uy
            px, py = x + _DT * v[0] + coast * vx, y + _DT * v[1] + coast * vy
            err = math.hypot(px - goal[0], py - goal[1]) + (1e-6 if a else 0.0)  # ties: stay
            if err < best_err:
                best, best_err = a, err
        return best

    def decision_due(self) -> bool:
        """Every tick until each agent has had a directive, then every k ticks and on arrivals."""
        return len(self.given) < self.N or self.t % self.decision_every == 0 or bool(self.arrived)

    def assignment(self) -> tuple[int, ...]:
        """Landmark per agent minimising the summed distance (exhaustive: N <= 6, 720 perms)."""
        return min(itertools.permutations(range(self.N)),
                   key=lambda perm: sum(self.dist(i, j) for i, j in enumerate(perm)))

    def expert_directive(self) -> Directive:
        """Oracle: the optimal assignment, one agent at a time (the whole-team oracle's first line); the
        no-op once all are assigned."""
        return next(iter(self.expert_directives()), NOOP)

    def expert_directives(self) -> list[Directive]:
        """The whole-team oracle: every agent whose landmark in the optimal assignment is not its
        directive in force gets its line."""
        wanted = [self._directive(agent, j) for agent, j in zip(self.agents, self.assignment())]
        return [d for agent, d in zip(self.agents, wanted) if self.given.get(agent) != d]

    # ------------------------------------------------------------------------------------ step
    def step(self, actions: dict[str, str]) -> list[Event]:
        """Apply one action per agent; events: conflict, duplicate, milestone, success/failure."""
        if self.t >= self.horizon:
            raise TeamTRError(f"spread episode is over ({self.horizon} ticks); call reset(seed).")
        joint = {}
        for agent in self.agents:
            name = actions.get(agent, "stay")
            if name not in ACTIONS:
                raise TeamTRError(f"spread action {name!r} for {agent} is invalid; allowed: {', '.join(ACTIONS)}.")
            joint[agent] = ACTIONS.index(name)
        _, rewards, _, _, _ = self.env.step(joint)
        self.t += 1
        self.tick_reward = float(sum(rewards.values()) / self.N)
        events: list[Event] = []
        targets: dict[int, list[str]] = {}
        for agent, d in self.in_force.items():
            j = self._landmark(d) if d is not None else None
            if j is not None:
                targets.setdefault(j, []).append(agent)
        clash = {j for j, who in targets.items() if len(who) > 1}
        for j in sorted(clash - self._clash):
            events.append(Event("conflict", targets[j][1], f"{' and '.join(targets[j])} both sent to landmark {j}"))
        self._clash = clash
        for i, k in itertools.combinations(range(self.N), 2):
            (x, y), (a, b) = self._pos(i), self._pos(k)
            if math.hypot(x - a, y - b) < self.world.agents[i].size + self.world.agents[k].size:
                self.collisions += 1
                events.append(Event("conflict", self.agents[i], f"{self.agents[i]} bumped into {self.agents[k]}"))
        stacked = set()
        for j in range(self.N):
            near = [self.agents[i] for i in range(self.N) if self.dist(i, j) < COVER_RADIUS]
            if len(near) > 1:
                stacked.add(j)
                if j not in self._stacked:  # once per stacking, not every tick it lasts
                    events.append(Event("duplicate", near[1], f"{' and '.join(near)} both on landmark {j}"))
        self._stacked = stacked
        self.arrived = set()
        for i, agent in enumerate(self.agents):
            j = self._landmark(self.in_force[agent]) if self.in_force[agent] is not None else None
            if j is not None and self.dist(i, j) < COVER_RADIUS and agent not in self._on:
                self.arrived.add(agent)
        self._on = {a for i, a in enumerate(self.agents) if min(self.dist(i, j) for j in range(self.N)) < COVER_RADIUS}
        covered = self.covered()
        for j in sorted(set(covered) - set(self._covered)):
            events.append(Event("milestone", None, f"landmark {j} covered"))
        self._covered = covered
        if self.t >= self.horizon:
            events += [Event("covered_at_end", None, f"landmark {j}") for j in covered]
            events.append(Event(self.outcome() or "failure", None, f"{len(covered)}/{self.N} landmarks covered"))
        return events
