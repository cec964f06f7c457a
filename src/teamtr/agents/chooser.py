"""Role agents that choose their primitive action with a model: the two-phase act they share.

A choosing agent's ``act`` does not answer at once: it returns an ``ActionRequest`` (its prompt, its
valid actions and the action a scripted agent would take), and whoever runs the tick gathers the
requests of every agent of every live team, hands each ``Resolver`` all of its requests in ONE call
(``resolve_all``: one scoring pass for the local LLM agents, one thread pool for the remote ones), and
gives each request its ``Answer``; the agent then turns the answer into the action it takes.

Bookkeeping is the scripted agent's (a directive it cannot carry out is ``directive_invalid``; a done
directive is ``directive_done``), except *following*: a valid directive is followed when the agent's
first action after receiving it is the one the world's planner gives for it (``world.plan``), and
ignored (``directive_ignored``) when the agent does something else. Answers carry events of their own
(``reply_invalid``, ``agent_fallback``, ...): they come back in ``after`` and the metrics count them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from teamtr.agents.scripted import ScriptedAgent
from teamtr.core import Directive, Event, World

QUESTION = "Your next action?"


@dataclass(frozen=True)
class Answer:
    """What a resolver found for one request: the chosen action's index (None: no usable answer, the
    agent takes the fallback) and the events of getting it."""

    index: int | None
    events: tuple[Event, ...] = ()


class Resolver(Protocol):
    """Answers many requests at once (the requests of every agent that shares it, in one tick)."""

    def resolve(self, requests: Sequence[ActionRequest]) -> list[Answer]: ...


@dataclass
class ActionRequest:
    """One agent's pending choice for this tick.

    ``system`` is the world's rules (the same for every agent of a world: one shared prompt prefix);
    ``prompt`` the agent's role prompt, its view, the directive in force and the question; ``actions``
    its valid primitive actions; ``fallback`` what the world's planner would do (a scripted agent's
    action); ``settle`` turns the answer into the action taken (the agent's callback).
    """

    agent: str
    system: str
    prompt: str
    actions: tuple[str, ...]
    fallback: str
    resolver: Resolver
    settle: Callable[[Answer], str] = field(repr=False)


def resolve_all(requests: Sequence[ActionRequest]) -> list[str]:
    """The actions of ``requests``: one ``resolve`` call per distinct resolver, in request order."""
    groups: dict[int, list[int]] = {}
    for i, request in enumerate(requests):
        groups.setdefault(id(request.resolver), []).append(i)
    answers: list[Answer | None] = [None] * len(requests)
    for idx in groups.values():
        found = requests[idx[0]].resolver.resolve([requests[i] for i in idx])
        for i, answer in zip(idx, found, strict=True):
            answers[i] = answer
    return [request.settle(answer) for request, answer in zip(requests, answers)]  # type: ignore[arg-type]


def role_word(name: str) -> str:
    """The role in an agent name: ``engineer_1`` -> ``engineer``, ``agent_B`` -> ``agent``,
    ``product_manager`` -> ``product manager``."""
    return re.sub(r"_(\d+|[A-Z])$", "", name).replace("_", " ")


def default_role_prompt(name: str) -> str:
    return f"You are {name}, the {role_word(name)} of a team. A coordinator gives you directives."


class ChoosingAgent(ScriptedAgent):
    """A role agent whose actions a ``Resolver`` chooses among its valid actions.

    Args:
        name: the agent's name in the world.
        resolver: answers this agent's requests (shared by many agents: that is the batching).
        role_prompt: who the agent is (default: ``default_role_prompt(name)``).
    """

    def __init__(self, name: str, resolver: Resolver, role_prompt: str | None = None) -> None:
        super().__init__(name, 1.0)
        self.resolver = resolver
        self.role_prompt = role_prompt or default_role_prompt(name)
        self._verdict: Directive | None = None  # a directive taken up, followed or not yet known
        self._events: list[Event] = []

    def reset(self, seed: int) -> None:
        super().reset(seed)
        self._verdict = None
        self._events = []

    def receive(self, world: World, directive: Directive) -> list[Event]:
        """Like the scripted agent, but whether a valid directive is followed shows in the next act."""
        events = super().receive(world, directive)
        if events and events[0].kind == "directive_followed":
            self._verdict = directive
            return []
        return events

    def act(self, world: World) -> str | ActionRequest:  # type: ignore[override]
        """An ``ActionRequest`` for this tick (a plain "wait" when the agent lost it)."""
        if self._waste:
            self._waste = False
            self._judge(world, "wait")
            return "wait"
        view = world.view(self.name)
        working = self.working(world)
        fallback = world.plan(self.name, working)
        lines = [self.role_prompt, view.text.strip(), f"Directive in force: {working.text if working else 'none'}.", QUESTION]
        return ActionRequest(self.name, world.task, "\n".join(lines),
                             tuple(view.actions), fallback, self.resolver,
                             lambda answer: self._settle(world, view.actions, fallback, answer))

    def _settle(self, world: World, actions: Sequence[str], fallback: str, answer: Answer) -> str:
        self._events += answer.events
        action = fallback if answer.index is None else actions[answer.index]
        self._judge(world, action, fallback)
        return action

    def _judge(self, world: World, action: str, planned: str | None = None) -> None:
        if self._verdict is None:
            return
        planned = planned if planned is not None else world.plan(self.name, self._verdict)
        kind = "directive_followed" if action == planned else "directive_ignored"
        self._events.append(Event(kind, self.name, self._verdict.task))
        self._verdict = None

    def after(self, world: World) -> list[Event]:
        events, self._events = self._events + super().after(world), []
        return events
