"""Exact answer scoring for a judge: log P(answer | system message, user message) in the model's chat
format, with the prefix-shared ``CandidateScorer`` (the system message is the shared prefix, each user
message a packed row, the answers its trie). ``teamtr.rewards.judge.Judge`` takes one as its scorer
(``teamtr.train.judge`` builds it from the config).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import ContextManager

import torch

from teamtr.policy.backbone import Backbone
from teamtr.policy.prompts import ChatFormat, TokenCache
from teamtr.policy.scoring import CandidateScorer, EncodedDecision, pack


class ModelAnswerScorer:
    """``scorer(system, prompts, answers) -> [len(prompts)][len(answers)]`` summed answer-token log-probs.

    Args:
        backbone: the loaded model and tokenizer.
        scorer: a ``CandidateScorer`` on ``backbone.model`` to reuse (the coordinator's); default: a new one.
        context: entered around every pass (``Coordinator.disable_adapter`` for the base model).
        batch: user messages per packed pass.
    """

    def __init__(self, backbone: Backbone, scorer: CandidateScorer | None = None,
                 context: Callable[[], ContextManager[None]] | None = None, batch: int = 16) -> None:
        self.scorer = scorer or CandidateScorer(backbone.model)
        self.context = context or contextlib.nullcontext
        self.chat = ChatFormat.from_tokenizer(backbone.tokenizer)
        self.tokens = TokenCache(backbone.tokenizer)
        self.batch = batch

    @torch.no_grad()
    def __call__(self, system: str, prompts: Sequence[str], answers: Sequence[str]) -> list[list[float]]:
        prefix = self.tokens([self.chat.head + system + self.chat.user_head])[0]
        dynamics = self.tokens([p + self.chat.assistant_head for p in prompts])
        cands = [tuple(ids) for ids in self.tokens(list(answers))]
        words = [len(a.split()) or 1 for a in answers]
        out: list[list[float]] = []
        with self.context():
            for s in range(0, len(dynamics), self.batch):
                decs = [EncodedDecision(tuple(d), cands, words) for d in dynamics[s : s + self.batch]]
                sums = self.scorer.forward(pack(prefix, decs, self.scorer.max_positions)).sums
                out += sums[:, : len(cands)].float().cpu().tolist()
        return out


__all__ = ["ModelAnswerScorer"]
