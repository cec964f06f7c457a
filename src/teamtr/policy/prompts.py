"""How a decision becomes tokens: static prefix, dynamic part, candidates.

A decision's text is the model's own chat format, cut in three:

    static  = <chat head> + task (system message) + <user head>     same for every state of a world
    dynamic = state text + recent history + <assistant head>         one per state
    candidate = directive text + end marker                          one per candidate

Each part is tokenised **separately** (``add_special_tokens=False``) and the token lists are
concatenated; that concatenation is, by definition, what the model scores. The end marker is the first
token the chat format puts after an assistant turn (``<|im_end|>`` for SmolLM2), so a candidate's
probability is that of the *whole* directive, not of a prefix of a longer one. Splitting at chat-format
boundaries (which end in a special token or a newline) keeps the separate tokenisation equal to the
tokenisation of the full string for ordinary text; ``tests/test_scoring.py`` checks that boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

_SYS, _USR, _AST = "\x00TEAMTR_SYSTEM\x00", "\x00TEAMTR_USER\x00", "\x00TEAMTR_ASSISTANT\x00"


class DecisionLike(Protocol):
    """What the coordinator reads of a state (``teamtr.team.TeamState`` fits)."""

    task: str
    state: str
    history: Sequence[str]
    candidates: Sequence[Any]  # Directive-like objects with ``.text``, or plain strings


@dataclass(frozen=True)
class Decision:
    """A plain ``DecisionLike`` for callers without a ``TeamState`` (a served request, a benchmark)."""

    task: str
    state: str
    history: tuple[str, ...]
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class ChatFormat:
    """The pieces of a chat format around the three parts of a decision."""

    head: str  # before the system text
    user_head: str  # between the system text and the user text
    assistant_head: str  # between the user text and the assistant's answer
    end: str  # after the assistant's answer (its first token is the candidate end marker)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> "ChatFormat":
        """Read the pieces off the tokenizer's chat template; a plain format when it has none."""
        if getattr(tokenizer, "chat_template", None):
            try:
                text = tokenizer.apply_chat_template(
                    [
                        {"role": "system", "content": _SYS},
                        {"role": "user", "content": _USR},
                        {"role": "assistant", "content": _AST},
                    ],
                    tokenize=False,
                )
                head, rest = text.split(_SYS)
                user_head, rest = rest.split(_USR)
                assistant_head, end = rest.split(_AST)
                return cls(head, user_head, assistant_head, end or "\n")
            except (ValueError, TypeError, KeyError):
                pass  # templates that reject a system role: use the plain format below
        return cls("", "\n\n", "\nDirective: ", "\n")


def user_text(decision: DecisionLike) -> str:
    """The dynamic user message: state, recent history, the question. Kept short: every token
    is paid for in every decision."""
    lines = [decision.state.strip()]
    goal = getattr(decision, "goal", "")  # a hierarchical coordinator's phase goal (team.hierarchy)
    if goal:
        lines.append(f"Goal: {goal}")
    if decision.history:
        lines.append("Recent: " + "; ".join(h.strip() for h in decision.history))
    lines.append("Next directive?")
    return "\n".join(lines)


def candidate_texts(decision: DecisionLike) -> list[str]:
    return [c if isinstance(c, str) else c.text for c in decision.candidates]


def word_count(text: str) -> int:
    """Words, as TWOSOME's word normalisation counts them (whitespace-separated, at least 1)."""
    return max(1, len(text.split()))


class TokenCache:
    """Tokenises strings once: candidate texts and task texts repeat in every decision."""

    def __init__(self, tokenizer: Any, max_items: int = 200_000) -> None:
        self.tokenizer = tokenizer
        self.max_items = max_items
        self._ids: dict[str, tuple[int, ...]] = {}

    def __call__(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._ids]
        if missing:
            if len(self._ids) + len(missing) > self.max_items:
                self._ids.clear()
            encoded = self.tokenizer(list(missing), add_special_tokens=False)["input_ids"]
            self._ids.update(zip(missing, map(tuple, encoded)))
        return [self._ids[t] for t in texts]
