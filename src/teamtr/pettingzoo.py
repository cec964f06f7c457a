"""A PettingZoo ``ParallelEnv`` view of a team: every role agent is a PettingZoo agent.

For training role agents with multi-agent RL libraries while a coordinator (the world's oracle by
default) issues directives. One ``step`` is one world tick: every live agent gives one action.

    from teamtr.pettingzoo import TeamParallelEnv
    env = TeamParallelEnv("escape-room", coordinator="expert", agents=4)
    observations, infos = env.reset(seed=0)

Spaces (the same objects on every call): the observation is text (``teamtr.gym.text_space()``):
the agent's local view ``world.view(agent).text``, then a line ``directive: <text>`` naming the
directive in force for it (the one it works on, else the team goal, else ``none``). The action is
an index into ``world.view(agent).actions`` in the fixed ``Discrete(max_actions)``;
``infos[agent]["action_mask"]`` marks the valid ones. An index outside them (or an agent left out of
``actions``) does the world's own no-action for that agent (``wait``/``stay`` in the built-in
worlds: the agent is left out of ``world.step``'s actions) and sets ``infos[agent]["invalid_action"]``.

Directives: at reset and at every tick after which ``world.decision_due()``, the coordinator picks a
candidate of the ``TeamState`` (``team.Team``'s candidates: ``world.directives()`` then the no-op)
and ``Team.deliver`` hands it to the role agents it addresses, as ``Team.step`` does. The
coordinator is ``"expert"`` (default: ``world.expert_directive()``), ``"noop"`` (never a directive),
or any ``callable(TeamState) -> int`` (a candidate index). Role agents take up every valid directive
(compliance 1: whether to follow it is the learner's choice).

Rewards: every agent gets the same team reward each tick: the reward composer's terms over that
tick's events (the first tick of a decision also counts the directive's delivery events and its
``length``/``repeat`` terms), plus the world's own reward of the tick (``env`` term). Summed over a
decision's ticks it equals ``Team.step``'s reward for that decision. Terminations and truncations
come from the world: once ``world.outcome()`` is set, every agent is truncated if
``world.truncated()`` (a cut: Overcooked's horizon, MPE's max cycles), else terminated.

``infos[agent]`` keys, after ``reset`` and every ``step``:

- ``action_mask``: ``int8`` array of shape ``(max_actions,)``, 1 for the valid action indices.
- ``plan``: the index of the world's own planner's action for this agent working on its directive
  (``world.plan`` through the scripted role agent; the role agents' oracle, as ``expert`` is the
  coordinator's), or -1 when that action is not among the valid ones.
- ``directive``: the text of the directive in force for the agent, or None.

and after every ``step`` only: ``terms`` (reward term -> weighted value of the tick; the reward is
their sum), ``events`` (every ``core.Event`` of the tick), ``outcome`` (``"success"``/``"failure"``
once ended, else None), ``invalid_action`` (the action was outside the mask).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from teamtr.agents.scripted import ScriptedAgent
from teamtr.core import NOOP, Directive, Event, TeamTRError, World
from teamtr.envs import make
from teamtr.rewards.terms import RewardComposer
from teamtr.team import Team, TeamState

try:
    from gymnasium import spaces
    from pettingzoo import ParallelEnv
except ImportError as err:
    raise TeamTRError(
        f"teamtr.pettingzoo needs PettingZoo ({err.name or err} is missing): run "
        "pip install 'teamtr[pettingzoo]'."
    ) from None

from teamtr.gym import text_space

MAX_ACTIONS = 32
Coordinator = Callable[[TeamState], int]
COORDINATORS: dict[str, Coordinator] = {
    "expert": lambda state: state.expert,
    "noop": lambda state: len(state.candidates) - 1,
}


def coordinator_of(spec: str | Coordinator) -> Coordinator:
    """``"expert"``, ``"noop"`` or a callable(TeamState) -> candidate index."""
    if callable(spec):
        return spec
    if spec not in COORDINATORS:
        raise TeamTRError(
            f"coordinator={spec!r} is not allowed; use {', '.join(map(repr, COORDINATORS))} or a "
            "callable(TeamState) -> candidate index."
        )
    return COORDINATORS[spec]


class TeamParallelEnv(ParallelEnv):
    """Role agents of a team as PettingZoo agents (see the module docstring).

    Args:
        world: a world name (``teamtr.envs.names()``), a ``"module:Class"`` path or a World.
        coordinator: who issues the directives: ``"expert"``, ``"noop"`` or a callable.
        rewards: the reward composer; default ``RewardComposer()``.
        max_actions: size of each agent's fixed action space.
        render_mode: None or ``"ansi"``.
        options: the world's options (only with a world name).
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "teamtr_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(
        self, world: str | World, coordinator: str | Coordinator = "expert",
        rewards: RewardComposer | None = None, max_actions: int = MAX_ACTIONS,
        render_mode: str | None = None, **options: Any,
    ) -> None:
        world = make(world, **options) if isinstance(world, str) else world
        # Scripted role agents keep each agent's directive in force and the world's record of it;
        # their planned action is only offered (infos "plan"), the learners' actions are played.
        self.scripted = {name: ScriptedAgent(name) for name in world.agents}
        self.team = Team(world, dict(self.scripted), rewards)
        self.coordinator = coordinator_of(coordinator)
        self.max_actions = max_actions
        self.render_mode = render_mode
        self.possible_agents = list(world.agents)
        self.agents: list[str] = []
        self._observation_spaces = {a: text_space() for a in self.possible_agents}
        self._action_spaces = {a: spaces.Discrete(max_actions) for a in self.possible_agents}
        self._rng = np.random.default_rng()
        self._valid: dict[str, tuple[str, ...]] = {}
        self._directive: Directive = NOOP
        self._fresh: list[Event] | None = None  # the delivery events, until the decision's first tick
        self._events: list[Event] = []  # the events of the decision so far

    @property
    def world(self) -> World:
        """The team's world."""
        return self.team.world

    def observation_space(self, agent: str) -> spaces.Text:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode; an unseeded reset draws its seed from the last seeded one's stream."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        state = self.team.reset(int(self._rng.integers(0, 2**31 - 1)) if seed is None else seed)
        self.agents = list(self.possible_agents)
        self._decide(state)
        return self._observe()

    def _decide(self, state: TeamState) -> None:
        """The coordinator picks a directive, which the addressed role agents receive now."""
        index = self.coordinator(state)
        if not 0 <= index < len(state.candidates):
            raise TeamTRError(
                f"the coordinator chose {index!r}; pick a candidate index in 0..{len(state.candidates) - 1}."
            )
        self._directive = state.candidates[index]
        self._fresh = self.team.deliver(self._directive)
        self._events = list(self._fresh)

    def _observe(self) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        """Observations and infos; asks each scripted role agent for its planned action, which is
        also what keeps the world's record of the directive each agent works on up to date."""
        observations, infos = {}, {}
        for name in self.agents:
            agent = self.scripted[name]
            directive = agent.working(self.world)
            view = self.world.view(name)
            if len(view.actions) > self.max_actions:
                raise TeamTRError(
                    f"{self.world.name}: {name} has {len(view.actions)} actions, more than "
                    f"max_actions={self.max_actions}; pass max_actions={len(view.actions)} or more."
                )
            self._valid[name], planned = view.actions, agent.act(self.world)
            mask = np.zeros(self.max_actions, dtype=np.int8)
            mask[: len(view.actions)] = 1
            plan = view.actions.index(planned) if planned in view.actions else -1
            text = directive.text if directive is not None else None
            observations[name] = f"{view.text}\ndirective: {text or 'none'}"
            infos[name] = {"action_mask": mask, "plan": plan, "directive": text}
        return observations, infos

    def step(self, actions: dict[str, int]):
        """One world tick with one action index per live agent (see the module docstring)."""
        if not self.agents:
            raise TeamTRError("TeamParallelEnv.step called after the episode ended; call reset() first.")
        chosen = {}
        for name in self.agents:
            index, valid = actions.get(name), self._valid[name]
            if index is not None and 0 <= int(index) < len(valid):
                chosen[name] = valid[int(index)]
        events, native = self.team.tick(chosen)
        self._events += events
        # The directive's own terms count once, on its first tick, as Team.step counts them once.
        directive, previous = (self._directive, self.team.previous) if self._fresh is not None else (NOOP, None)
        events = (self._fresh or []) + events
        reward, terms = self.team.rewards(events, directive, previous, native)
        self._fresh = None
        outcome = self.world.outcome()
        if outcome is not None or self.world.decision_due():
            state = self.team.conclude(self._directive, self._events)
            if outcome is None:
                self._decide(state)
        cut = outcome is not None and self.world.truncated()
        live = self.agents
        observations, infos = self._observe()
        for name in live:
            infos[name].update(terms=dict(terms), events=list(events), outcome=outcome,
                               invalid_action=name not in chosen)
        if outcome is not None:
            self.agents = []
        return (observations, dict.fromkeys(live, float(reward)),
                {name: outcome is not None and not cut for name in live},
                dict.fromkeys(live, cut), infos)

    def render(self) -> str | None:
        if not self.agents:
            return None
        lines = [self.world.describe()]
        for name in self.agents:
            directive = self.scripted[name].working(self.world)
            lines.append(f"{name}: {directive.text if directive is not None else 'no directive'}")
        return "\n".join(lines)

    def close(self) -> None:
        pass
