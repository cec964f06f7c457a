"""A relay race: the baton must pass from runner to runner in order, then the last one finishes."""

from __future__ import annotations

from teamtr.core import AgentView, Directive, Event, Outcome
from teamtr.envs.registry import check_int


class RelayWorld:
    """Runners pass a baton along in order; the last one crosses the line before the step budget runs out."""

    name = "relay"
    team_size_option = ("runners", 3)  # the generalisation suite tries one runner more
    vocabulary_option = None

    def __init__(self, runners: int = 3, max_steps: int | None = None) -> None:
        check_int(self.name, "runners", runners, 2, 8)
        self.agents = [f"runner_{i + 1}" for i in range(runners)]
        self.max_steps = check_int(self.name, "max_steps", runners + 2 if max_steps is None else max_steps, 1, 1000)
        self.task = (f"Relay race: {', '.join(self.agents)} pass the baton in that order, then "
                     f"{self.agents[-1]} crosses the line. Fail after {self.max_steps} ticks.")

    def reset(self, seed: int) -> None:
        self.holder, self.tick, self._outcome = 0, 0, None

    def describe(self) -> str:
        return f"tick {self.tick} of {self.max_steps}. {self.agents[self.holder]} holds the baton."

    def view(self, agent: str) -> AgentView:
        return AgentView(agent, self.describe(), ("wait", "run") if self.check(agent, None) is None else ("wait",))

    def directives(self) -> list[Directive]:
        out = [Directive(f"{a}: pass the baton to {b}", a, "run") for a, b in zip(self.agents, self.agents[1:])]
        return [*out, Directive(f"{self.agents[-1]}: cross the line", self.agents[-1], "run")]

    def check(self, agent: str, directive: Directive | None) -> str | None:
        return None if self.agents[self.holder] == agent else f"{agent} does not hold the baton"

    def plan(self, agent: str, directive: Directive | None) -> str:
        return "run" if directive is not None and self.check(agent, directive) is None else "wait"

    def done(self, agent: str, directive: Directive) -> bool:
        return self.agents[self.holder] != agent or self._outcome is not None

    def step(self, actions: dict[str, str]) -> list[Event]:
        self.tick += 1
        events: list[Event] = []
        runner = self.agents[self.holder]
        if actions.get(runner) == "run" and self.holder + 1 < len(self.agents):
            self.holder += 1  # the world's own event kind: logged and counted, no built-in term weighs it
            events.append(Event("handoff", runner, f"baton to {self.agents[self.holder]}"))
        elif actions.get(runner) == "run":
            self._outcome = "success"
            events.append(Event("success", runner, "crossed the line"))
        if self._outcome is None and self.tick >= self.max_steps:
            self._outcome = "failure"
            events.append(Event("failure", None, f"step budget {self.max_steps}"))
        return events

    def outcome(self) -> Outcome | None:
        return self._outcome

    def truncated(self) -> bool:
        return False  # the step budget is in the task text: running out of it fails the task

    def expert_directive(self) -> Directive:
        return self.directives()[self.holder]

    def decision_due(self) -> bool:
        return True
