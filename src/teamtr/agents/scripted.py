"""Scripted role agents: carry out directives with the world's own planner.

A scripted agent holds the directive in force for it (schedule or allocate kind) and the team goal
(goal kind). Each tick it asks ``world.plan`` for the next primitive action of its directive; when it
has none, or the directive is done, it plans with the goal (worlds may let a goal bias what idle
agents pick) or with nothing (idle). It knows no world in particular: only ``core.World``.
"""

from __future__ import annotations

import random

from teamtr.core import Directive, Event, World


class ScriptedAgent:
    """One role agent following directives.

    Args:
        name: the agent's name in the world (``world.agents``).
        compliance: probability of taking up a valid directive; otherwise the agent keeps the one
            it had (``directive_ignored``). 1.0: always follows.
    """

    def __init__(self, name: str, compliance: float = 1.0) -> None:
        self.name = name
        self.compliance = compliance
        self.directive: Directive | None = None
        self.goal: Directive | None = None
        self._done_reported = False
        self._waste = False
        self._rng = random.Random(0)

    def reset(self, seed: int) -> None:
        """Forget every directive; reseed the compliance draws (same seed, same choices)."""
        self.directive = None
        self.goal = None
        self._done_reported = False
        self._waste = False
        self._rng = random.Random(seed)

    def receive(self, world: World, directive: Directive) -> list[Event]:
        """Take (or not) a directive addressed to this agent; return the directive event."""
        if directive.kind == "goal":
            self.goal = directive
            return []
        reason = world.check(self.name, directive)
        if reason is not None:
            # Trying what it cannot do costs the agent this tick (the seed's "wasted" instruction).
            self._waste = True
            return [Event("directive_invalid", self.name, f"{directive.task}: {reason}")]
        if self.compliance < 1.0 and self._rng.random() >= self.compliance:
            return [Event("directive_ignored", self.name, directive.task)]
        self.directive = directive
        self._done_reported = False
        return [Event("directive_followed", self.name, directive.task)]

    def working(self, world: World) -> Directive | None:
        """The directive the agent works on now: its own if not done, else the goal (or None).

        A directive once done stays done for the agent, even if the world later undoes the work
        (a bug sends a module back): that needs a new directive, not a ghost of the old one.
        """
        if (
            self.directive is not None
            and not self._done_reported
            and not world.done(self.name, self.directive)
        ):
            return self.directive
        return self.goal

    def act(self, world: World) -> str:
        """The primitive action for this tick."""
        action = world.plan(self.name, self.working(world))
        if self._waste:
            self._waste = False
            return "wait"
        return action

    def after(self, world: World) -> list[Event]:
        """Events after the tick: ``directive_done`` once, when the directive needs nothing more."""
        if (
            self.directive is not None
            and not self._done_reported
            and world.done(self.name, self.directive)
        ):
            self._done_reported = True
            return [Event("directive_done", self.name, self.directive.task)]
        return []
