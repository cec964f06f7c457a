"""Overcooked-AI behind the World protocol: two chefs, onion soup, five classic layouts.

The game itself (grid, pots, cooking, rewards) is the PyPI package ``overcooked`` 0.2.x
(HumanCompatibleAI's Overcooked-AI, kept for numpy 2). We drive its ``OvercookedGridworld``
directly rather than its ``OvercookedEnv``: the env fetches a motion planner on every step, and the
package caches planners as pickles inside its own site-packages folder (a module constant, not an
option), which breaks on a read-only install. We build the package's ``MotionPlanner`` in memory
instead (at most 0.3 s per layout, memoised per process), so nothing is ever written to disk.

A directive is a sub-task for one chef ("chef_1: put an onion in the pot"); the chef walks to the
right feature with the motion planner and interacts. Sub-task logic lives in ``overcooked_chef``.
"""

from __future__ import annotations

import math
import random
from typing import Any

from teamtr.core import NOOP, AgentView, Directive, Event, Outcome, TeamTRError
from teamtr.envs import overcooked_chef as chef
from teamtr.envs.registry import check_choice, check_int

INSTALL_HINT = "pip install 'teamtr[overcooked]'"

#: Our layout names -> the package's layout files. ``counter_circuit`` is the onion-only variant
#: used in the Overcooked-AI paper; the package's plain ``counter_circuit`` adds tomato orders.
LAYOUTS: dict[str, str] = {
    "cramped_room": "cramped_room",
    "asymmetric_advantages": "asymmetric_advantages",
    "coordination_ring": "coordination_ring",
    "forced_coordination": "forced_coordination",
    "counter_circuit": "counter_circuit_o_1order",
}

SOUP_REWARD = 20.0  # the game's sparse reward per delivered onion soup
#: Default goal per layout, in soups per 400 ticks. Measured on held-out seeds (20 per layout and
#: policy, `teamtr eval --env overcooked --set env.layout=L --policy random heuristic noop`; soups
#: served, min-max): random directives cramped_room 0-4, asymmetric_advantages 2-7, coordination_ring
#: 1-5, forced_coordination 0-3, counter_circuit 0-3; the heuristic 7-10, 14, 9-11, 12, 7-9. A goal
#: of one soup would let random play "succeed" everywhere. Left alone (noop) the chefs' own
#: greedy rule serves about as many as the heuristic: a coordinator must beat the noop row, not the goal.
GOAL_SOUPS: dict[str, int] = {"cramped_room": 6, "asymmetric_advantages": 10, "coordination_ring": 7,
                              "forced_coordination": 7, "counter_circuit": 6}

#: ``state_text`` values: ``grid`` draws the kitchen (~70-95 tokens a decision with SmolLM2's
#: tokenizer); ``compact`` says in one line what each chef holds, stands by and is doing, plus the
#: pots and counter items (~40 tokens); its static grid moves into the task text, which the
#: coordinator encodes once per layout (``docs/overcooked.md``).
STATE_TEXTS: tuple[str, ...] = ("grid", "compact")

_MOTION: dict[str, tuple[int, int]] = {"up": (0, -1), "down": (0, 1), "right": (1, 0), "left": (-1, 0)}
ACTIONS: tuple[str, ...] = ("up", "down", "left", "right", "stay", "interact")
_PLANNERS: dict[str, Any] = {}  # layout -> (mdp, MotionPlanner), built once per process


def _load(layout: str) -> tuple[Any, Any]:
    """The package's gridworld and motion planner for ``layout`` (memoised)."""
    if layout not in _PLANNERS:
        try:
            from overcooked.mdp.overcooked_mdp import OvercookedGridworld
            from overcooked.planning.planners import MotionPlanner
        except ImportError as exc:
            raise TeamTRError(
                f"The overcooked world needs the 'overcooked' package ({exc}). Run: {INSTALL_HINT}"
            ) from None
        mdp = OvercookedGridworld.from_layout_name(LAYOUTS[layout])
        # Every counter is a valid motion goal, so chefs can hand items over counters.
        _PLANNERS[layout] = (mdp, MotionPlanner(mdp, counter_goals=mdp.get_counter_locations()))
    return _PLANNERS[layout]


class OvercookedWorld:
    """Two chefs (``chef_0``, ``chef_1``) cooking onion soup for ``horizon`` ticks.

    Options: ``layout`` (one of ``LAYOUTS``, or a list of them: each episode's layout is
    ``layout[seed % len(layout)]``, so consecutive seeds take turns and one coordinator trains on
    many kitchens), ``horizon`` (ticks, default 400), ``decision_every`` (the coordinator decides
    at least every k ticks, default 10), ``shaped`` (add the game's shaped sub-goal rewards to
    ``tick_reward``), ``goal_soups`` (soups for a ``success`` outcome; default the layout's
    ``GOAL_SOUPS`` per 400 ticks of horizon, rounded up: above what random directives serve, below
    what the heuristic coordinator serves, so that success separates the two), ``state_text``
    (``grid`` or ``compact``, see ``STATE_TEXTS``).
    ``tick_reward`` after each ``step``: 20 per delivered soup (+ shaped rewards when ``shaped``).
    Each delivery is also a ``soup`` event: the headline metric ``soups`` (soups per episode) counts them.
    The expert (``expert_directive``) is a hand-written heuristic, not an oracle: its rows are
    called ``heuristic``.
    """

    name = "overcooked"
    team_size_option = None  # the layouts are drawn for two cooks
    vocabulary_option = None
    expert_name = "heuristic"  # expert_directive is a hand-written rule, not an optimal planner
    headline_metrics = {"soups": "soup"}  # soups delivered per episode (one ``soup`` event each)
    #: ``layout`` may list several kitchens: tables then show one suite per layout, and the
    #: generalisation suite adds each layout not trained on (``eval.suites``).
    split_option = ("layout", tuple(LAYOUTS))

    def __init__(
        self,
        layout: str | list[str] = "cramped_room",
        horizon: int = 400,
        decision_every: int = 10,
        shaped: bool = False,
        goal_soups: int | None = None,
        state_text: str = "grid",
    ) -> None:
        layouts = list(layout) if isinstance(layout, (list, tuple)) else [layout]
        if not layouts:
            raise TeamTRError(f"{self.name}: option layout=[] is empty; give a layout or a list of them: "
                              f"{', '.join(LAYOUTS)}.")
        for name in layouts:
            check_choice(self.name, "layout", name, tuple(LAYOUTS))
        check_int(self.name, "horizon", horizon, 1, 100_000)
        check_int(self.name, "decision_every", decision_every, 1, 100_000)
        if goal_soups is not None:
            check_int(self.name, "goal_soups", goal_soups, 0, 1_000)
        if not isinstance(shaped, bool):
            raise TeamTRError(f"{self.name}: option shaped={shaped!r} is not allowed; allowed: true, false.")
        check_choice(self.name, "state_text", state_text, STATE_TEXTS)
        self.layouts, self.horizon, self.decision_every = layouts, horizon, decision_every
        self.shaped, self._goal_option, self.state_text = shaped, goal_soups, state_text
        self.agents = ["chef_0", "chef_1"]
        self.reset(0)

    def _set_layout(self, layout: str) -> None:
        """The kitchen, goal and task text of ``layout`` (a no-op when it is already set)."""
        if getattr(self, "layout", None) == layout:
            return
        self.layout = layout
        self.mdp, self.mp = _load(layout)
        self.kitchen = chef.kitchen(layout, self.mdp, self.mp)
        self.goal_soups = (self._goal_option if self._goal_option is not None
                           else math.ceil(GOAL_SOUPS[layout] * self.horizon / 400))
        rules = (f"Two chefs cook onion soup in an Overcooked kitchen ({layout.replace('_', ' ')}). "
                 "A soup needs 3 onions in a pot; then a chef starts the cooking (20 ticks); then a chef "
                 "with a dish takes the soup to the serving window. Each soup served scores 20. ")
        if self.state_text == "grid":
            self.task = rules + (
                "Grid: X counter, O onions, D dishes, P pot, S serving window, . floor, 0 and 1 the chefs, "
                "o d s items on counters. Choose one directive for one chef; keep both chefs busy.")
        else:  # the static kitchen lives in the prefix, encoded once per layout
            self.task = rules + (
                f"Kitchen ({'/'.join(self.kitchen.grid)}): X counter, O onions, D dishes, P pot, S serving "
                "window, . floor. Choose one directive for one chef; keep both chefs busy.")

    # ----------------------------------------------------------------------------------- episode
    def reset(self, seed: int) -> None:
        """Start from the layout's standard start (the list's ``seed % len`` one); ``seed`` drives
        only that choice and the unjamming moves."""
        self._set_layout(self.layouts[seed % len(self.layouts)])
        self.rng = random.Random(seed)
        self.state = self.mdp.get_standard_start_state()
        self.soups, self.tick_reward = 0, 0.0
        # The directive each chef worked on in the last plan() call (None: its own greedy rule),
        # and which chefs finished it in the last tick (done() is true for that tick only, so a
        # chef keeps repeating a sub-task it is not taken off, and a re-issued one is not skipped).
        self.in_force: dict[str, Directive | None] = {a: None for a in self.agents}
        self.given: dict[str, Directive] = {}  # the last directive each chef worked on
        self.just_done = {a: False for a in self.agents}
        self.stuck = {a: False for a in self.agents}
        self._due, self._changed = True, False
        self.targets: dict[str, Any] = {a: None for a in self.agents}  # motion goal per chef
        self.blocked = {a: 0 for a in self.agents}
        self.avoid = {a: 0 for a in self.agents}
        self._conflict = False

    @property
    def t(self) -> int:
        return int(self.state.timestep)

    def _player(self, agent: str) -> Any:
        return self.state.players[self.agents.index(agent)]

    def outcome(self) -> Outcome | None:
        if self.t < self.horizon:
            return None
        return "success" if self.soups >= self.goal_soups else "failure"

    def truncated(self) -> bool:
        """At the horizon: the reward is per soup and the kitchen would go on, so the end is a cut."""
        return self.t >= self.horizon

    # ---------------------------------------------------------------------------------- texts
    def describe(self) -> str:
        """The state text of ``state_text``: ``grid`` (one character a cell, then one summary line;
        ~70 tokens on cramped_room) or ``compact`` (one line, ``_compact``)."""
        if self.state_text == "compact":
            return self._compact()
        rows = [list(r) for r in self.kitchen.grid]
        for pos, obj in self.state.objects.items():
            if self.mdp.get_terrain_type_at_pos(pos) == "X":
                rows[pos[1]][pos[0]] = obj.name[0]
        for i, p in enumerate(self.state.players):
            rows[p.position[1]][p.position[0]] = str(i)
        holds = "; ".join(f"{a} holds {chef.held(self._player(a)) or 'nothing'}" for a in self.agents)
        pots = "; ".join(self.kitchen.pot_text(self.state, i, p) for i, p in enumerate(self.mdp.get_pot_locations()))
        return "\n".join("".join(r) for r in rows) + (
            f"\n{holds}. {pots}. Served {self.soups} soups, {self.horizon - self.t} ticks left."
        )

    def _compact(self) -> str:
        """Per chef: where it stands, what it holds and the sub-task it works on (``own:`` its own
        greedy rule); then the pots and the items on counters. No tick count: the horizon is a cut
        (learners bootstrap at it), so the same text serves a 200-tick training world and a 400-tick
        evaluation one."""
        parts = []
        for i, a in enumerate(self.agents):
            p, d = self._player(a), self.in_force[a]
            if d is None or self.just_done[a]:  # done: the chef falls back on its own rule
                doing = "own: " + chef.TASKS[self.kitchen.greedy_task(self.state, i)]
            else:
                doing = ("cannot: " if self.stuck[a] else "") + chef.TASKS[d.task]
            parts.append(f"{a} by {self.kitchen.nearest(p)}, holds {chef.held(p) or 'nothing'}, {doing}")
        pots = ", ".join(self.kitchen.pot_text(self.state, i, p) for i, p in enumerate(self.mdp.get_pot_locations()))
        items = [o.name for pos, o in sorted(self.state.objects.items()) if pos not in self.kitchen.pots]
        counters = f". On counters: {', '.join(items)}" if items else ""
        return "; ".join(parts) + f". {pots[0].upper()}{pots[1:]}{counters}."

    def view(self, agent: str) -> AgentView:
        p = self._player(agent)
        text = f"{agent} at {p.position} holds {chef.held(p) or 'nothing'}.\n{self.describe()}"
        return AgentView(agent=agent, text=text, actions=ACTIONS)

    # ----------------------------------------------------------------------------- directives
    def directives(self) -> list[Directive]:
        """Every sub-task some chef can take up now (the ``wait`` directives always)."""
        out = []
        for agent in self.agents:
            for task in chef.TASKS:
                d = chef.directive(agent, task)
                if self.check(agent, d) is None:
                    out.append(d)
        return out

    def check(self, agent: str, directive: Directive) -> str | None:
        if agent not in self.agents:
            return f"{agent!r} is not a chef here; chefs: {', '.join(self.agents)}"
        if directive.target != agent:
            return f"the directive is for {directive.target}, not {agent}"
        if directive.task not in chef.TASKS:
            return f"unknown sub-task {directive.task!r}"
        return self.kitchen.check(self.state, self.agents.index(agent), directive.task)

    def done(self, agent: str, directive: Directive) -> bool:
        """True for the tick right after ``agent`` finished ``directive`` (then it repeats it)."""
        return self.in_force.get(agent) == directive and self.just_done[agent]

    def plan(self, agent: str, directive: Directive | None) -> str:
        """Next primitive action for ``agent``; ``None`` runs the chef's own greedy rule."""
        self.in_force[agent] = directive
        if directive is not None:
            # A new directive: ask again next tick, so the other chef can be re-directed at once.
            self._changed = self._changed or directive != self.given.get(agent)
            self.given[agent] = directive
        idx = self.agents.index(agent)
        task = directive.task if directive is not None else self.kitchen.greedy_task(self.state, idx)
        if directive is not None and self.check(agent, directive) is not None:
            # Impossible now (the other chef started the pot it was sent to start): the chef works on
            # its own rule meanwhile and takes the directive up again once it is possible. Standing
            # still froze it for the rest of an episode under a coordinator that did not re-direct
            # it (README, "The same recipe on the session-28 heuristic").
            task = self.kitchen.greedy_task(self.state, idx)
        action, self.targets[agent] = self.kitchen.step_toward(self.state, idx, task, self.avoid[agent] > 0)
        other = self.agents[1 - idx]
        in_the_way = self.blocked[other] > 0 and action in ("stay", "interact")
        if action is None or ((in_the_way or max(self.blocked.values()) > 1) and self.rng.random() < 0.5):
            # No way around the other chef, or standing in its way: random moves unjam dead-end
            # corridors and single pot cells, as Overcooked-AI's own greedy human model does.
            action = self.rng.choice(list(_MOTION))
        return action

    def decision_due(self) -> bool:
        """After a tick with a milestone, a new directive, a chef done or newly unable to carry out
        its directive; every k ticks."""
        return self._due

    def _expert_wanted(self) -> dict[str, Directive]:
        """Per chef, the heuristic's directive if the chef needs to hear it: new, possible now, and
        not a ``wait`` that a chef on its own rule would do anyway. A directed wait lasts until the
        next directive, while a chef's own rule moves on by itself (on forced_coordination the cook's
        rule waits for an onion and then pots it); a clone that learned the wait and missed the
        directive that ends it froze the cook for the whole episode (README, "Overcooked-AI trained")."""
        out = {}
        for i, agent in enumerate(self.agents):
            task = self.kitchen.expert_task(self.state, i)
            if task == "wait" and self.in_force[agent] is None and self.kitchen.greedy_task(self.state, i) == "wait":
                continue
            d = chef.directive(agent, task)
            if d != self.given.get(agent) and self.check(agent, d) is None:
                out[agent] = d
        return out

    def expert_directive(self) -> Directive:
        """The hand-written heuristic coordinator (``overcooked_chef.expert_task``)."""
        wanted = self._expert_wanted()
        # First the chef that needs a new sub-task most: none yet, finished, or stuck.
        order = sorted(self.agents, key=lambda a: self.in_force[a] is not None and not self.stuck[a])
        return next((wanted[a] for a in order if a in wanted), NOOP)

    def expert_directives(self) -> list[Directive]:
        """The heuristic directing the whole team at once: every chef whose wanted sub-task it
        needs to hear (``_expert_wanted``) gets its line."""
        wanted = self._expert_wanted()
        return [wanted[a] for a in self.agents if a in wanted]

    # ------------------------------------------------------------------------------------ step
    def step(self, actions: dict[str, str]) -> list[Event]:
        """Apply one primitive action per chef; events are milestones, idle, conflict, duplicate."""
        if self.t >= self.horizon:
            raise TeamTRError(f"overcooked episode is over ({self.horizon} ticks); call reset(seed).")
        joint = []
        for agent in self.agents:
            name = actions.get(agent, "stay")
            if name not in ACTIONS:
                raise TeamTRError(f"overcooked action {name!r} for {agent} is invalid; allowed: {', '.join(ACTIONS)}.")
            joint.append("interact" if name == "interact" else _MOTION.get(name, (0, 0)))
        before = self.state
        events = self.kitchen.pre_step_events(before, joint, self.agents)
        self._due = (before.timestep + 1) % self.decision_every == 0 or self._changed
        self._changed = False
        self.state, info = self.mdp.get_state_transition(before, joint)
        flags = info["event_infos"]
        sparse = float(sum(info["sparse_reward_by_agent"]))
        self.tick_reward = sparse + (float(sum(info["shaped_reward_by_agent"])) if self.shaped else 0.0)
        for i, agent in enumerate(self.agents):
            moved = before.players[i].position != self.state.players[i].position
            bumped = (joint[i] in _MOTION.values() and joint[i] != (0, 0) and not moved
                      and self.kitchen.is_floor_ahead(before.players[i], joint[i]))
            self.blocked[agent] = self.blocked[agent] + 1 if bumped else 0  # ticks in a row
            # Keep walking around the other chef for a few ticks, or the planner's shortest path
            # leads straight back into it.
            self.avoid[agent] = 4 if bumped else max(0, self.avoid[agent] - 1)
            if joint[i] == (0, 0):
                events.append(Event("idle", agent, "stayed still"))
            if flags["potting_onion"][i]:
                events.append(Event("milestone", agent, "onion in pot"))
            if flags["soup_delivery"][i]:
                self.soups += 1
                events += [Event("milestone", agent, "soup delivered"), Event("soup", agent, "soup delivered")]
            d = self.in_force[agent]
            self.just_done[agent] = d is not None and chef.effect_done(d.task, flags, i, before, self.state, self.mdp)
            stuck = d is not None and self.check(agent, d) is not None
            # A directive that became impossible is news once, not at every tick it stays so.
            self._due = self._due or self.just_done[agent] or (stuck and not self.stuck[agent])
            self.stuck[agent] = stuck
        events += self.kitchen.pot_events(before, self.state)
        clash = self.targets["chef_0"] is not None and self.targets["chef_0"] == self.targets["chef_1"]
        if clash and not self._conflict:
            events.append(Event("conflict", None, f"both chefs head for {self.kitchen.feature_name(self.targets['chef_0'])}"))
        self._conflict = clash
        self._due = self._due or any(e.kind == "milestone" for e in events)
        if self.t >= self.horizon:
            events.append(Event(self.outcome() or "failure", None, f"{self.soups} soups served"))
        return events
