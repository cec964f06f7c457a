"""Local LLM role agents: a language model chooses each primitive action among the valid ones.

The agent reads its role prompt, the world's rules, its own view (``world.view``) and the directive
in force, and takes the valid action the model scores highest (exact candidate scoring, greedy).
Every LLM agent of every live team that shares one ``LLMResolver`` is scored in ONE call per tick
(``agents.chooser``). The model comes in as a ``ChoiceScore`` callable, so this module needs no
torch: ``policy.choices.ChoiceScorer`` is the one train/ and eval/ inject (by default the
coordinator's own backbone with its adapter disabled: one copy of the weights).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from teamtr.agents.chooser import ActionRequest, Answer, ChoosingAgent


@dataclass(frozen=True)
class ChoicePrompt:
    """One choice for a language model: a system text, a user text and the options to score; ``role``:
    score with that role's adapter (``policy/roles.py``), None: the base model."""

    system: str
    user: str
    options: tuple[str, ...]
    role: str | None = None


class ChoiceScore(Protocol):
    """Scores every option of every prompt (higher is likelier); one list per prompt, option order."""

    def __call__(self, prompts: Sequence[ChoicePrompt]) -> list[list[float]]: ...


class LLMResolver:
    """Chooses the best-scored valid action of every request in one ``score`` call.

    ``calls`` counts the calls, ``scored`` the requests scored (the batching is testable).
    ``role_of``: an agent name -> the role whose adapter scores its requests (None: the base model).
    """

    def __init__(self, score: ChoiceScore, role_of: Callable[[str], str | None] | None = None) -> None:
        self.score = score
        self.role_of = role_of
        self.calls = 0
        self.scored = 0

    def resolve(self, requests: Sequence[ActionRequest]) -> list[Answer]:
        answers: list[Answer] = [Answer(None)] * len(requests)
        todo = [i for i, r in enumerate(requests) if len(r.actions) > 1]
        for i, r in enumerate(requests):
            if len(r.actions) == 1:  # nothing to choose: no model call
                answers[i] = Answer(0)
        if todo:
            self.calls += 1
            self.scored += len(todo)
            role = self.role_of or (lambda agent: None)
            scores = self.score([ChoicePrompt(requests[i].system, requests[i].prompt, requests[i].actions,
                                              role(requests[i].agent)) for i in todo])
            for i, row in zip(todo, scores, strict=True):
                answers[i] = Answer(max(range(len(row)), key=row.__getitem__))
        return answers


class LLMAgent(ChoosingAgent):
    """A role agent played by a local language model (see the module docstring).

    Args:
        name: the agent's name in the world.
        resolver: the ``LLMResolver`` shared by all LLM agents of all teams scored together.
        role_prompt: who the agent is (default: from its name, ``engineer_1`` -> "the engineer").
    """

    def __init__(self, name: str, resolver: LLMResolver, role_prompt: str | None = None) -> None:
        super().__init__(name, resolver, role_prompt)
