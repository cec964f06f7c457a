"""The shared words of TeamTR: directives, events, agent views and the World protocol.

This module is the ground floor: every other part of the package may import it, and it imports
nothing of the package and no torch. Worlds, role agents and reward terms stand side by side above
it and talk to each other only through these types.

Vocabulary (one name per concept, used the same in code, config, logs and docs):

- *world*: a cooperative multi-agent environment (``World``).
- *role agent*: one member of the team; turns the directive in force for it into primitive actions.
- *coordinator*: the LLM being trained; each tick it picks one *directive* among the *candidates*.
- *decision*: one coordinator choice in one state.
- *event*: something that happened in a tick; rewards and metrics are computed from events only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol, runtime_checkable

DirectiveKind = Literal["schedule", "goal", "allocate", "noop"]
DIRECTIVE_KINDS: tuple[str, ...] = ("schedule", "goal", "allocate", "noop")

#: The built-in event kinds: the built-in reward terms and metrics key on these names. A world may
#: emit kinds of its own (a relay world's "handoff"): they are kept in the events, logged and counted
#: by the metrics, and ignored by the terms that do not know them.
EVENT_KINDS: tuple[str, ...] = (
    "conflict",  # two agents fight over one resource (same item, same pot, same landmark)
    "idle",  # an able agent spent the tick with nothing to do
    "duplicate",  # finished work was done again
    "milestone",  # a sub-goal was reached (detail names it)
    "success",  # the team's task is done
    "failure",  # the episode ended without success (step limit, deadline)
    "directive_followed",  # a role agent took up the directive
    "directive_ignored",  # a role agent got a valid directive and kept its previous one
    "directive_invalid",  # a role agent got a directive it cannot carry out
    "directive_done",  # a role agent finished what its directive asked
)

Outcome = Literal["success", "failure"]


@dataclass(frozen=True)
class Directive:
    """One candidate coordinator action.

    ``text`` is exactly what the coordinator LLM scores ("agent_B: fetch the map"); ``target`` is the
    role agent it addresses (``None`` for team-wide goals and the no-op); ``task`` is the
    machine-readable form the world understands ("fetch:map"); ``kind`` is one of the seed's three
    kinds (``schedule``, ``goal``, ``allocate``) or ``noop``.
    """

    text: str
    target: str | None
    task: str
    kind: str = "schedule"

    def __post_init__(self) -> None:
        if self.kind not in DIRECTIVE_KINDS:
            raise ValueError(
                f"Directive kind {self.kind!r} is not one of {', '.join(DIRECTIVE_KINDS)}."
            )
        if not self.text.strip():
            raise ValueError("Directive text is empty; give the words the coordinator scores.")


#: The no-op directive every TeamState offers: keep every directive in force as it is.
NOOP = Directive(text="no new directive", target=None, task="noop", kind="noop")


@dataclass(frozen=True)
class Event:
    """Something that happened in one tick. ``agent`` is the role agent concerned, if any.

    ``kind`` is one of ``EVENT_KINDS`` or a world's own kind: any identifier ("handoff").
    """

    kind: str
    agent: str | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind.isidentifier():
            raise ValueError(
                f"Event kind {self.kind!r} is not an identifier; use a word such as "
                f"{', '.join(EVENT_KINDS[:3])} or a world's own kind (\"handoff\")."
            )


@dataclass(frozen=True)
class AgentView:
    """What one role agent sees: its local text and the primitive actions valid for it now."""

    agent: str
    text: str
    actions: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class World(Protocol):
    """A cooperative multi-agent world, as the coordinator and the role agents see it.

    A world knows nothing of LLMs, role-agent policies or rewards. One coordinator decision is made
    per tick; a tick is one call of ``step`` with one primitive action per agent.

    Attributes:
        name: registry name ("escape-room").
        agents: the role agents' names, in a fixed order.
        task: the static task text (rules, goal): the same for every state of an episode, so the
            coordinator can encode it once as part of a shared prompt prefix.
        team_size_option: ``(option, default)`` of the constructor option that sets how many role
            agents there are (escape-room: ``("agents", 3)``), or ``None`` for a fixed team; the
            generalisation suite evaluates one agent more.
        vocabulary_option: ``(option, value)`` that switches to held-out names (``("names",
            "heldout")``), or ``None``; the generalisation suite evaluates it.
    """

    name: str
    agents: list[str]
    task: str
    team_size_option: tuple[str, int] | None
    vocabulary_option: tuple[str, str] | None

    def reset(self, seed: int) -> None:
        """Start a new episode; the same seed gives the same episode."""

    def describe(self) -> str:
        """Compact global state text (what changes tick to tick)."""

    def view(self, agent: str) -> AgentView:
        """Local view of one agent: its text and valid primitive actions."""

    def directives(self) -> list[Directive]:
        """The candidate directives that make sense now (the no-op excluded; Team adds it)."""

    def check(self, agent: str, directive: Directive) -> str | None:
        """``None`` if ``agent`` can carry out ``directive`` now, else the reason it cannot."""

    def plan(self, agent: str, directive: Directive | None) -> str:
        """The next primitive action for ``agent`` working on ``directive`` (``None``: no directive).

        This is the world's own low-level controller (a path planner, Overcooked's motion planner):
        scripted role agents call it to execute a directive over several ticks.
        """

    def done(self, agent: str, directive: Directive) -> bool:
        """True when ``directive`` needs nothing more from ``agent``."""

    def step(self, actions: dict[str, str]) -> list[Event]:
        """Apply one primitive action per agent; return the events of the tick."""

    def outcome(self) -> Outcome | None:
        """``success`` or ``failure`` once the episode has ended, else ``None``."""

    def truncated(self) -> bool:
        """True once the episode has ended by a cut rather than by its task.

        A step limit is either part of the task (a deadline, a step budget the task text states:
        running out of ticks is the task's failure, a real termination; always False) or a cut (a
        fixed horizon such as Overcooked's 400 ticks or MPE's max cycles, where the reward is per
        tick and the task would go on: True once the ticks ran out, and learners bootstrap from the
        value of the last state).
        """

    def expert_directive(self) -> Directive:
        """An oracle's directive for the current state (demonstrations and an upper bound)."""

    def decision_due(self) -> bool:
        """True when the coordinator should decide now.

        Tick-by-tick worlds (escape-room, software-team) return True every tick; real-time worlds
        (Overcooked) return True when a role agent is done or its directive became impossible, or
        every k ticks, and the Team runs the ticks in between with the directives in force.
        """


@runtime_checkable
class GoalWorld(Protocol):
    """A world that exposes phase goals, for a hierarchical coordinator (``team.hierarchy``).

    The goals are ``goal`` directives (``target`` None): the strategic level picks one, and the
    tactical level reads it in its prompt; a goal is never delivered to the role agents.
    """

    def goals(self) -> list[Directive]:
        """The goals that make sense now (at least one while the episode runs)."""

    def expert_goal(self) -> Directive:
        """An oracle's goal for the current state: one of ``goals()``."""


@runtime_checkable
class TeamExpertWorld(Protocol):
    """A world whose oracle can direct the whole team at once (``team.directives: whole_team``).

    Without it, the whole-team oracle is the one-directive oracle's single line (``team.expert_lines``).
    """

    def expert_directives(self) -> list[Directive]:
        """The oracle's new directives for this tick, at most one per agent, each addressed to one
        agent (empty: no new directive)."""


def expert_in_turn(world: World, assign: Callable[[Directive], None],
                   alone: Callable[[Directive], Directive | None] = lambda d: d) -> list[Directive]:
    """A whole-team oracle from a one-directive one: ask ``world.expert_directive()``, put the answer
    in force with ``assign`` (the world's own record of who does what, which its oracle reads), ask
    again, until there is no new directive, one addressed to no single agent, or one to an agent
    already addressed. ``alone`` maps an answer onto a directive to one agent (or None: stop), for
    worlds whose oracle allocates pairs. The caller saves and restores what ``assign`` changes."""
    out: list[Directive] = []
    for _ in world.agents:
        directive = world.expert_directive()
        line = alone(directive) if directive.kind != "noop" else None
        if line is None or line.target is None or "+" in line.target or line.target in {d.target for d in out}:
            break
        out.append(line)
        assign(line)
    return out


class TeamTRError(Exception):
    """An error meant for a person: the message names what is wrong and how to fix it."""
