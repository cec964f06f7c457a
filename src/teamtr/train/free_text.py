"""Training in free-text mode (``team.directives: free_text``): the coordinator writes its directive
over the whole vocabulary (``policy.free_text``), the Team parses it (``team.FreeText``), and the
token-level PPO update of ``train/whole_team.py`` trains it, every output token a branching one.

Exact per-token entropy and KL need whole next-token distributions, [T, V] floats per decision: too
many to keep for a rollout (49,152 entries a token for SmolLM2). So the update recomputes them: the
acting policy's under a snapshot of the adapter taken before the update's first step (the weights
the rollout was collected with: bit-identical, since nothing else moves them), and the reference's
under the reference's weights; only the taken tokens' log-probs are kept from acting (the ratio's
denominator). That costs two gradient-free passes per minibatch on top of the gradient pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from teamtr.policy.coordinator import Coordinator
from teamtr.policy.decoding import fold_prefixes
from teamtr.policy.free_text import TextScores, act_free_text, score_texts
from teamtr.team import FreeText, TeamState
from teamtr.train.whole_team import ReferenceWeights, TokenActor, TokenInputs, pad_rows


@dataclass
class TextDecision:
    """One free-text decision as the update reads it (T output tokens)."""

    prefix: tuple[int, ...]
    dynamic: tuple[int, ...]
    tokens: tuple[int, ...]
    logp: torch.Tensor  # [T] acting policy's log-prob of each token taken


class FreeTextActor(TokenActor):
    """Acts for a ``Collector`` in free-text mode; ``max_new_tokens``: ``policy.max_new_tokens``."""

    def __init__(self, coordinator: Coordinator, reference: ReferenceWeights, max_new_tokens: int) -> None:
        super().__init__(coordinator, reference)
        self.max_new_tokens = max_new_tokens
        self.acting: dict[str, torch.Tensor] | None = None  # the adapter the rollout was collected with

    def act(self, states: Sequence[TeamState], generator: torch.Generator
            ) -> tuple[list[FreeText], torch.Tensor, list[int]]:
        out = act_free_text(self.coordinator, states, max_new_tokens=self.max_new_tokens, generator=generator)
        handles = [-1] * len(states)
        for i, (prefix, dynamic) in enumerate(out.prompts):
            handles[i] = len(self.store)
            self.store.append(TextDecision(prefix, dynamic, out.tokens[i], out.scores.logp[i, : len(out.tokens[i])].cpu()))
        choices = [FreeText(text, None if lines is None else tuple(lines)) for text, lines in zip(out.texts, out.lines)]
        return choices, out.values, handles

    def begin_update(self) -> None:
        self.acting = self.coordinator.adapter_state()

    def _score(self, items: Sequence[TextDecision]) -> TextScores:
        prefix, dynamics = fold_prefixes([d.prefix for d in items], [d.dynamic for d in items])
        return score_texts(self.coordinator.backbone.model, prefix, dynamics, [d.tokens for d in items],
                           temperature=self.coordinator.temperature)

    def policy_inputs(self, items: Sequence[TextDecision]) -> TokenInputs:
        assert self.acting is not None, "policy_inputs() before begin_update()"
        # The gradient-free passes first: swapping adapters in and out writes the parameters in place,
        # which would invalidate a graph built before.
        with torch.no_grad():
            with self.coordinator.use_adapter(self.acting):
                old = self._score(items).full
            if self.reference is None:
                ref = old
            else:
                with self.reference():
                    ref = self._score(items).full
        new = self._score(items)
        c = self.coordinator
        hidden = new.value_hidden.float()
        values = c.value_head(hidden if c.value_grad_to_trunk else hidden.detach()).squeeze(-1)
        mask = new.mask
        old_logp = pad_rows([d.logp for d in items], mask.shape[1], None, 0.0).to(mask.device)
        assert new.full is not None and old is not None and ref is not None
        valid = mask[..., None].expand_as(new.full)
        return TokenInputs(new.logp, old_logp, new.full, old, ref, valid, mask, values)
