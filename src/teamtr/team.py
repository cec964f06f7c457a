"""Team: a world, one role agent per agent, a reward composer and the directive memory.

The Team is what the coordinator plays against: ``reset(seed)`` gives a ``TeamState`` (the prompt
parts and the candidate directives), ``step(choice)`` hands the chosen directive to the role agents
it addresses, runs ticks until the world wants the next decision, and returns the reward of that
decision. Worlds, role agents and reward terms never import each other; this module composes them.

Who receives a directive: ``target`` names one agent, or several joined by ``+`` (an allocation:
"engineer_1+engineer_2"); a ``goal`` directive (``target`` None) goes to every agent as the team goal;
the no-op goes to nobody and keeps every directive in force.

A whole-team directive (``team.directives: whole_team``) is one line per agent: ``step`` then takes
the candidate indices of the lines that give new orders (an agent whose line is "carry on" keeps the
directive in force and is left out), delivers each to its agent, and rewards, remembers and reports
the decision as their ``joint_directive``.

A free-text directive (``team.directives: free_text``) is a ``FreeText``: the coordinator's text and
the lines a parser found in it (``policy.free_text.parse_lines``). Each line's directive reaches its
agent with the whole text as its ``text`` (an LLM role agent reads what the coordinator wrote; a
scripted one only its task); the decision is rewarded and remembered as the text itself, so the
length and repeat terms weigh what was written. Text the parser could not map (``lines`` None)
reaches nobody: it is one ``directive_invalid`` event, penalised by the ``invalid`` term.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from teamtr.agents.chooser import ActionRequest, resolve_all
from teamtr.agents.scripted import ScriptedAgent
from teamtr.core import NOOP, Directive, Event, TeamExpertWorld, TeamTRError, World
from teamtr.rewards.terms import RewardComposer


class RoleAgent(Protocol):
    """What a Team needs of a role agent (``agents.scripted.ScriptedAgent`` is the reference)."""

    def reset(self, seed: int) -> None: ...

    def receive(self, world: World, directive: Directive) -> list[Event]:
        """Take up (or not) a directive addressed to it; return directive_* events."""
        ...

    def act(self, world: World) -> str | ActionRequest:
        """The primitive action for this tick, or a request that the tick resolves together with
        every other agent's (``agents.chooser``: one model call for all agents of all teams)."""
        ...

    def after(self, world: World) -> list[Event]:
        """Events once the tick ran (``directive_done``)."""
        ...


@dataclass(frozen=True)
class TeamState:
    """What the coordinator sees at one decision.

    Attributes:
        world: the world's registry name.
        task: static rules text, identical for every state of an episode with the same options.
        state: ``world.describe()``: the compact state text of this tick.
        history: the last ``history_len`` short lines: recent directives and notable events.
        candidates: ``world.directives()`` then ``NOOP`` (always last).
        expert: index in ``candidates`` of ``world.expert_directive()`` (the oracle's choice).
        expert_lines: the whole-team oracle's new lines (``expert_lines``): candidate indices, at
            most one per agent; empty: no new directive.
        tick: world ticks since reset.
        goal: the phase goal in force (``team.hierarchy``: the strategic level's), "" when none.
    """

    world: str
    task: str
    state: str
    history: tuple[str, ...]
    candidates: tuple[Directive, ...]
    expert: int
    tick: int
    goal: str = ""
    expert_lines: tuple[int, ...] = ()


def joint_directive(lines: Sequence[Directive]) -> Directive:
    """One directive standing for a whole-team output's new lines (the no-op when there are none):
    texts joined by newlines, targets by ``+``, tasks by ``;``."""
    if not lines:
        return NOOP
    if len(lines) == 1:
        return lines[0]
    return Directive("\n".join(d.text for d in lines), "+".join(d.target or "team" for d in lines),
                     ";".join(d.task for d in lines))


def expert_lines(world: World, candidates: Sequence[Directive], expert: int) -> tuple[int, ...]:
    """Candidate indices of the whole-team oracle's lines: a ``TeamExpertWorld``'s
    ``expert_directives()``; for any other world, the one-directive oracle's choice if it addresses
    one agent (a goal, an allocation or the no-op has no line: no new directive)."""
    if isinstance(world, TeamExpertWorld):
        lines = world.expert_directives()
    else:
        chosen = candidates[expert]
        lines = [chosen] if chosen.target is not None and "+" not in chosen.target else []
    try:
        return tuple(candidates.index(line) for line in lines)
    except ValueError:
        raise TeamTRError(f"{world.name}: a line of expert_directives() is not among the candidates "
                          f"({', '.join(repr(d.text) for d in lines)}); the world's directives() and "
                          "expert_directives() disagree.") from None


def recipients(directive: Directive, agents: Sequence[str]) -> list[str]:
    """The agents a directive addresses (see the module docstring)."""
    if directive.kind == "noop":
        return []
    if directive.target is None:
        return list(agents)
    names = directive.target.split("+")
    unknown = [name for name in names if name not in agents]
    if unknown:
        raise TeamTRError(
            f"Directive {directive.text!r} targets unknown agent(s) {unknown}; agents: {agents}."
        )
    return names


@dataclass(frozen=True)
class FreeText:
    """A free-text decision: what the coordinator wrote and the candidate indices of the lines it
    orders (``None``: the text says nothing the grammar allows, an invalid directive)."""

    text: str
    lines: tuple[int, ...] | None


def free_text_directives(choice: FreeText, candidates: Sequence[Directive]) -> tuple[Directive, list[Directive], list[Event]]:
    """(the decision's directive, the line directives to deliver, events) of a free-text choice."""
    text = choice.text.strip() or "(nothing)"
    if choice.lines is None:
        invalid = Directive(text, None, "free_text", "schedule")
        return invalid, [], [Event("directive_invalid", None, "free text: it names no valid directive")]
    lines = [replace(candidates[_index(c, len(candidates))], text=text) for c in choice.lines]
    lines = [d for d in lines if d.kind != "noop"]
    if not lines:
        return Directive(text, None, "noop", "noop"), [], []
    return replace(joint_directive(lines), text=text), lines, []


#: Builds the role agent of one world agent (``agents.mixed.MixedTeam``: a mixed team from the config).
AgentFactory = Callable[[World, str], RoleAgent]

Actions = dict[str, "str | ActionRequest"]


def settle(gathered: Sequence[Actions]) -> list[dict[str, str]]:
    """Each team's actions, with every pending request of every team resolved in one go."""
    pending = [(k, name, a) for k, acts in enumerate(gathered) for name, a in acts.items()
               if not isinstance(a, str)]
    out = [dict(acts) for acts in gathered]
    if pending:
        for (k, name, _), action in zip(pending, resolve_all([a for _, _, a in pending])):
            out[k][name] = action
    return out  # type: ignore[return-value]


@dataclass
class _Decision:
    """A decision being carried out: its directive, its events so far, ticks and world reward."""

    directive: Directive
    events: list[Event] = field(default_factory=list)
    ticks: int = 0
    native: float = 0.0


class Team:
    """A world with its role agents and rewards, stepped one coordinator decision at a time.

    Args:
        world: any ``core.World``.
        agents: one role agent per ``world.agents`` name; default: ``ScriptedAgent`` with the
            world's ``compliance`` attribute (1.0 when it has none).
        rewards: the reward composer; default: ``RewardComposer()`` (default weights).
        history_len: how many history lines a TeamState carries.
        make_agent: builds each world agent's role agent (instead of ``agents``), again whenever the
            world draws fresh agent names.
    """

    def __init__(
        self,
        world: World,
        agents: dict[str, RoleAgent] | None = None,
        rewards: RewardComposer | None = None,
        history_len: int = 3,
        make_agent: AgentFactory | None = None,
    ) -> None:
        self.world = world
        self._compliance = float(getattr(world, "compliance", 1.0))
        self._make_agent = make_agent
        self._built_agents = not agents  # rebuilt when a world draws fresh agent names per episode
        self.agents: dict[str, RoleAgent] = agents or self._build()
        missing = [name for name in world.agents if name not in self.agents]
        if missing:
            raise TeamTRError(f"Team has no role agent for {missing}; world agents: {world.agents}.")
        self.rewards = rewards or RewardComposer()
        if history_len < 0:
            raise TeamTRError(f"history_len={history_len} is negative; use 0 or more.")
        self.history: deque[str] = deque(maxlen=history_len)
        self.previous: Directive | None = None
        self.ticks = 0
        self.finished = True
        self.state: TeamState | None = None
        self._decision: _Decision | None = None
        self.goal: Directive | None = None  # set by a hierarchical coordinator (train/hierarchy.py)
        self.goal_tick = 0  # ticks when the goal was set
        self.milestones = 0  # milestone events this episode
        self.goal_milestones = 0  # milestone events when the goal was set

    def set_goal(self, goal: Directive) -> TeamState:
        """Put ``goal`` in force (it shows in every TeamState until the next one); returns the state."""
        if self.finished or self.state is None:
            raise TeamTRError("Team.set_goal called after the episode ended; call reset(seed) first.")
        self.goal, self.goal_tick, self.goal_milestones = goal, self.ticks, self.milestones
        self.state = self._observe()
        return self.state

    def reset(self, seed: int) -> TeamState:
        """Start an episode; the same seed gives the same episode (world and compliance draws)."""
        self.world.reset(seed)
        if self._built_agents and list(self.agents) != self.world.agents:
            self.agents = self._build()
        for i, agent in enumerate(self.agents.values()):
            agent.reset(seed * 1009 + i)
        self.history.clear()
        self.previous = None
        self.ticks = 0
        self.finished = False
        self._decision = None
        self.goal, self.goal_tick, self.milestones, self.goal_milestones = None, 0, 0, 0
        self.state = self._observe()
        return self.state

    def _build(self) -> dict[str, RoleAgent]:
        if self._make_agent is not None:
            return {name: self._make_agent(self.world, name) for name in self.world.agents}
        return {name: ScriptedAgent(name, self._compliance) for name in self.world.agents}

    def _observe(self) -> TeamState:
        candidates = (*self.world.directives(), NOOP)
        expert = self.world.expert_directive()
        try:
            index = candidates.index(expert)
        except ValueError:
            raise TeamTRError(
                f"{self.world.name}: the expert directive {expert.text!r} is not among the "
                "candidates; the world's directives() and expert_directive() disagree."
            ) from None
        return TeamState(
            expert_lines=expert_lines(self.world, candidates, index),
            world=self.world.name,
            task=self.world.task,
            state=self.world.describe(),
            history=tuple(self.history),
            candidates=candidates,
            expert=index,
            tick=self.ticks,
            goal=self.goal.text if self.goal is not None else "",
        )

    def step(self, choice: int | Sequence[int] | FreeText) -> tuple[TeamState, float, bool, dict[str, Any]]:
        """Carry out candidate ``choice`` of the current state (a sequence: the lines of a
        whole-team directive; a ``FreeText``: see the module docstring).

        Returns:
            ``(state, reward, done, info)``; ``done`` is True once the episode has ended, either way.
            info has ``events`` (every event of the decision), ``terms`` (reward term -> value),
            ``outcome`` (``success``/``failure``/None), ``terminated`` and ``truncated``, ``ticks``
            (world ticks this decision ran), ``directive`` (the chosen Directive).

        How an episode ends decides which of ``terminated``/``truncated`` is True (never both): a
        world whose step limit is part of its task (escape-room's step budget, software-team's
        deadline) *terminates* when it runs out, a failure after which nothing more is earned; a
        world whose limit is a cut (Overcooked's horizon, MPE's max cycles: ``world.truncated()``)
        is *truncated*, and learners bootstrap from the value of the last state.
        """
        self.begin(choice)
        while not self.advance(settle([self.gather()])[0]):
            pass
        return self.finish()

    # -- the phases of ``step``, for a TeamBatch that resolves the role agents' requests of every
    # -- team in one go each tick: begin, then gather + advance until the decision ends, then finish.
    def begin(self, choice: int | Sequence[int] | FreeText) -> None:
        """Check ``choice`` and deliver its directive."""
        if self.finished or self.state is None:
            raise TeamTRError("Team.step called after the episode ended; call reset(seed) first.")
        if self._decision is not None:
            raise TeamTRError("Team.begin called inside a decision; finish() it first.")
        candidates = self.state.candidates
        if isinstance(choice, FreeText):
            directive, lines, invalid = free_text_directives(choice, candidates)
            self._decision = _Decision(directive, invalid + self.deliver(lines))
            return
        whole_team = isinstance(choice, (list, tuple))
        lines = [candidates[_index(c, len(candidates))] for c in (choice if whole_team else [choice])]
        directive = joint_directive([d for d in lines if d.kind != "noop"]) if whole_team else lines[0]
        self._decision = _Decision(directive, self.deliver(lines if whole_team else directive))

    def gather(self) -> Actions:
        """Every role agent's action (or pending request) for the next tick."""
        return {name: self.agents[name].act(self.world) for name in self.world.agents}

    def advance(self, actions: dict[str, str]) -> bool:
        """Run one tick of the decision; True once the world wants a decision or has ended."""
        assert self._decision is not None, "advance() before begin()"
        tick_events, tick_native = self.tick(actions)
        self._decision.events += tick_events
        self._decision.native += tick_native
        self._decision.ticks += 1
        return self.world.outcome() is not None or self.world.decision_due()

    def finish(self) -> tuple[TeamState, float, bool, dict[str, Any]]:
        """Reward the decision and observe the next state (``step``'s return value)."""
        assert self._decision is not None, "finish() before begin()"
        decision, self._decision = self._decision, None
        directive, events = decision.directive, decision.events
        reward, terms = self.rewards(events, directive, self.previous, decision.native)
        self.conclude(directive, events)
        outcome = self.world.outcome()
        truncated = self.finished and self.world.truncated()
        info = {
            "events": events,
            "terms": terms,
            "outcome": outcome,
            "terminated": self.finished and not truncated,
            "truncated": truncated,
            "ticks": decision.ticks,
            "directive": directive,
        }
        return self.state, reward, self.finished, info  # type: ignore[return-value]

    # -- the tick-level steps of a decision, for views that drive the role agents themselves
    # -- (``teamtr.pettingzoo``): deliver, then tick until the decision ends, then conclude.
    def deliver(self, directive: Directive | Sequence[Directive]) -> list[Event]:
        """Hand ``directive`` (or each line of a whole-team one) to the role agents it addresses;
        returns the directive_* events."""
        if not isinstance(directive, Directive):
            return [e for line in directive for e in self.deliver(line)]
        events: list[Event] = []
        if directive.kind == "goal":
            events.append(Event("directive_followed", None, directive.task))
        for name in recipients(directive, self.world.agents):
            events += self.agents[name].receive(self.world, directive)
        return events

    def tick(self, actions: dict[str, str]) -> tuple[list[Event], float]:
        """One world tick with ``actions`` (agent -> primitive action), then the role agents'
        ``after`` events; returns the tick's events and the world's own reward of the tick."""
        events = list(self.world.step(actions))  # a world may hand back a list it keeps
        native = float(getattr(self.world, "tick_reward", 0.0))
        self.ticks += 1
        for name in self.world.agents:
            events += self.agents[name].after(self.world)
        return events, native

    def conclude(self, directive: Directive, events: list[Event]) -> TeamState:
        """End the decision that carried out ``directive`` with ``events``: remember it, note
        whether the episode ended, and observe the next state."""
        self.previous = directive
        self.milestones += sum(e.kind == "milestone" for e in events)
        self._remember(directive, events)
        self.finished = self.world.outcome() is not None
        self.state = self._observe()
        return self.state

    def _remember(self, directive: Directive, events: list[Event]) -> None:
        """History lines: the directive, then what went wrong or right with it (short, for tokens)."""
        if directive.kind != "noop":
            self.history.append(directive.text)
        for event in events:
            if event.kind == "milestone":
                self.history.append(event.detail)
            elif event.kind == "directive_invalid":
                self.history.append(f"{event.agent or 'team'} could not: {event.detail.split(': ', 1)[-1]}")
            elif event.kind == "conflict":
                self.history.append(f"conflict: {event.detail}")


def _index(choice: Any, n: int) -> int:
    """``choice`` as a candidate index in 0..n-1, else a TeamTRError."""
    try:  # numpy and torch integer scalars are fine; floats and bools are not
        index = -1 if isinstance(choice, bool) else operator.index(choice)
    except TypeError:
        index = -1
    if not 0 <= index < n:
        raise TeamTRError(f"choice {choice!r} is outside the candidates: pick an index in 0..{n - 1} ({n} candidates).")
    return index


class TeamBatch:
    """Many Teams stepped together (one coordinator call scores all live states at once).

    ``step(choices)`` takes one choice per *live* team, in the order of ``live()``, and returns one
    ``(state, reward, done, info)`` per live team in the same order.
    """

    def __init__(self, teams: Sequence[Team]) -> None:
        if not teams:
            raise TeamTRError("TeamBatch needs at least one Team.")
        self.teams = list(teams)

    def reset(self, seeds: Sequence[int]) -> list[TeamState]:
        """Reset team i with seeds[i]; one seed per team."""
        if len(seeds) != len(self.teams):
            raise TeamTRError(f"TeamBatch.reset got {len(seeds)} seeds for {len(self.teams)} teams.")
        return [team.reset(seed) for team, seed in zip(self.teams, seeds)]

    def live(self) -> list[int]:
        """Indices of the teams whose episode is still running."""
        return [i for i, team in enumerate(self.teams) if not team.finished]

    def states(self) -> list[TeamState]:
        """Current states of the live teams, in ``live()`` order."""
        return [self.teams[i].state for i in self.live()]  # type: ignore[misc]

    def step(self, choices: Sequence[int | Sequence[int] | FreeText]) -> list[tuple[TeamState, float, bool, dict[str, Any]]]:
        """Step every live team with its choice (``choices[k]`` for ``live()[k]``)."""
        live = self.live()
        if len(choices) != len(live):
            raise TeamTRError(
                f"TeamBatch.step got {len(choices)} choices for {len(live)} live teams; give one "
                "choice per live team, in live() order."
            )
        teams = [self.teams[i] for i in live]
        for team, choice in zip(teams, choices):
            team.begin(choice)
        running = teams
        while running:  # one tick of every team still inside its decision, requests resolved together
            actions = settle([team.gather() for team in running])
            running = [team for team, acts in zip(running, actions) if not team.advance(acts)]
        return [team.finish() for team in teams]
