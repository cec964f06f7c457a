"""Exact scores of options after a chat prompt: the local LLM role agents' model (``agents.llm``).

A prompt is cut like a coordinator decision (``policy.prompts``): static = chat head + system text +
user head (shared by every tick of an agent: encoded once per batch and memoised), dynamic = user
text + assistant head, options = action text + end marker. One ``CandidateScorer`` pass scores every
prompt of a batch (one pass per distinct system text and role adapter: a prompt with a ``role`` is
scored by base + that role's adapter, ``policy/roles.py``; PEFT applies one adapter set per pass, and
the shared prefix's keys and values differ per adapter anyway, so a tick costs one pass per role).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, ContextManager, Protocol

import torch

from teamtr.core import TeamTRError
from teamtr.policy.backbone import load_backbone
from teamtr.policy.prompts import ChatFormat, TokenCache, word_count
from teamtr.policy.scoring import CandidateScorer, EncodedDecision, pack


class ChoicePromptLike(Protocol):
    """What is scored (``agents.llm.ChoicePrompt`` fits): system text, user text, options, role."""

    system: str
    user: str
    options: Sequence[str]
    role: str | None


class ChoiceScorer:
    """``agents.llm.ChoiceScore`` on a model.

    Args:
        tokenizer: the model's tokenizer.
        scorer: a ``CandidateScorer`` on the model.
        normalization: ``sum``, ``token`` or ``word`` (as ``policy.normalization``).
        context: entered around every pass of prompts without a role (the coordinator's
            ``disable_adapter``: the base model).
        role_context: role -> entered around the passes of that role's prompts (``RoleAdapters.active``).
    """

    def __init__(self, tokenizer: Any, scorer: CandidateScorer, normalization: str = "token",
                 context: Callable[[], ContextManager[None]] = contextlib.nullcontext,
                 role_context: Callable[[str], ContextManager[None]] | None = None) -> None:
        self.scorer = scorer
        self.normalization = normalization
        self.context = context
        self.role_context = role_context
        self.chat = ChatFormat.from_tokenizer(tokenizer)
        self.tokens = TokenCache(tokenizer)
        end = self.tokens([self.chat.end])[0]
        self.end_ids: tuple[int, ...] = end[:1] if end else (int(tokenizer.eos_token_id),)

    @classmethod
    def of_coordinator(cls, coordinator: Any) -> ChoiceScorer:
        """The coordinator's own backbone without its adapter (one copy of the weights), or with a
        role's adapter for prompts that name a role."""
        roles = getattr(coordinator, "roles", None)
        return cls(coordinator.tokenizer, coordinator.scorer, coordinator.normalization,
                   coordinator.disable_adapter, roles.active if roles is not None else None)

    @classmethod
    def of_backbone(cls, name: str, device: str = "auto", dtype: str = "auto",
                    normalization: str = "token") -> ChoiceScorer:
        """Another backbone (a built-in name, a hub id or a local directory), loaded once."""
        backbone = load_backbone(name, device=device, dtype=dtype)
        return cls(backbone.tokenizer, CandidateScorer(backbone.model), normalization)

    @torch.no_grad()
    def __call__(self, prompts: Sequence[ChoicePromptLike]) -> list[list[float]]:
        """Scores [len(prompts)][options of each], normalised as ``normalization`` says."""
        return [row.float().cpu().tolist() for row in self.score_tensors(prompts)]

    def score_tensors(self, prompts: Sequence[ChoicePromptLike]) -> list[torch.Tensor]:
        """Per prompt its options' scores (a [options] tensor, differentiable when grad is on)."""
        statics = self.tokens([self.chat.head + p.system + self.chat.user_head for p in prompts])
        dynamics = self.tokens([p.user + self.chat.assistant_head for p in prompts])
        options = [self.tokens(list(p.options)) for p in prompts]
        groups: dict[tuple[str | None, tuple[int, ...]], list[int]] = {}
        for i, prefix in enumerate(statics):
            groups.setdefault((getattr(prompts[i], "role", None), prefix), []).append(i)
        out: list[torch.Tensor] = [torch.empty(0)] * len(prompts)
        for role in dict.fromkeys(r for r, _ in groups):
            with self._context(role):
                for (r, prefix), idx in groups.items():
                    if r != role:
                        continue
                    decs = [EncodedDecision(dynamics[i], [o + self.end_ids for o in options[i]],
                                            [word_count(t) for t in prompts[i].options]) for i in idx]
                    rows = self.scorer.forward(pack(prefix, decs, self.scorer.max_positions)).normalized(
                        self.normalization)
                    for j, i in enumerate(idx):
                        out[i] = rows[j, : len(prompts[i].options)]
        return out

    def _context(self, role: str | None) -> ContextManager[None]:
        if role is None:
            return self.context()
        if self.role_context is None:
            raise TeamTRError(f"a prompt asks for role {role!r}'s adapter, but this model carries no role adapters "
                              "(team.llm.role_adapters needs team.llm.backbone: same).")
        return self.role_context(role)
