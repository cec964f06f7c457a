"""Free-text directives: the coordinator writes whatever it likes, sampled over the whole vocabulary.

Policy. At every output token pi(token | prompt, output so far) = softmax over the *whole* vocabulary
of the logits divided by ``temperature``; the output stops at the first stop token (the chat format's
end marker, or the tokenizer's end of sequence; it is part of the output and of its probability) or
after ``max_new_tokens`` tokens. The log-prob of an output is the sum of its tokens' log-probs, and
each token's entropy and KL are exact sums over the vocabulary.

Batching is ``policy.decoding``'s: one KV cache for all rows, a shared static prefix encoded once (rows
under different prefixes carry their own, ``fold_prefixes``), then one model call per generated token for all rows still writing (a finished row feeds nothing,
a masked hole). ``score_texts`` recomputes the same values (with gradients when enabled) in one
teacher-forced pass, the full next-token distributions included (the token-level PPO update); the
tests compare both with the model's own full-sequence logits.

What the text means is not this module's business: ``parse_lines`` maps it onto a state's whole-team
grammar (``policy.grammar.parse_free_text``), and callers treat ``None`` as an invalid directive.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from teamtr.core import TeamTRError
from teamtr.policy.decoding import KVBatch, fold_prefixes, output_head, pick_tokens
from teamtr.policy.grammar import parse_free_text
from teamtr.policy.prompts import DecisionLike

if TYPE_CHECKING:
    from teamtr.policy.coordinator import Coordinator


@dataclass
class TextScores:
    """Per-token values of B free-text outputs (T: the longest output; V: the vocabulary)."""

    logp: torch.Tensor  # [B, T] log pi(token | prompt, output so far); 0 at padding
    entropy: torch.Tensor  # [B, T] entropy of the full next-token distribution; 0 at padding
    mask: torch.Tensor  # [B, T] bool: a real output token
    value_hidden: torch.Tensor  # [B, H] final-norm hidden state at each prompt's last token
    full: torch.Tensor | None = None  # [B, T, V] every token's log-prob (``score_texts`` only)

    @property
    def total(self) -> torch.Tensor:
        """[B] log pi(output | prompt)."""
        return self.logp.sum(-1)


def _vocab_logp(hidden: torch.Tensor, head: tuple[torch.Tensor, torch.Tensor | None], temperature: float) -> torch.Tensor:
    """Log-softmax over the whole vocabulary, in float32: [..., H] -> [..., V]."""
    weight, bias = head
    logits = hidden.float() @ weight.float().T
    if bias is not None:
        logits = logits + bias.float()
    return torch.log_softmax(logits / temperature, dim=-1)


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    return -(logp.exp() * logp.masked_fill(torch.isinf(logp), 0.0)).sum(-1)


def _check(model: Any, prefix: Sequence[int], dynamics: Sequence[Sequence[int]], max_new_tokens: int,
           temperature: float) -> None:
    if not dynamics or any(not d for d in dynamics):
        raise TeamTRError("Free-text decoding needs at least one prompt, each with a non-empty dynamic part.")
    if temperature <= 0 or max_new_tokens < 1:
        raise TeamTRError(f"temperature must be > 0 and max_new_tokens >= 1, got {temperature}, {max_new_tokens}.")
    limit = int(getattr(model.config, "max_position_embeddings", 2048))
    longest = len(prefix) + max(map(len, dynamics)) + max_new_tokens
    if longest > limit:
        raise TeamTRError(f"prompt + policy.max_new_tokens = {longest} tokens exceed the model's context of "
                          f"{limit}; lower policy.max_new_tokens.")


@torch.no_grad()
def decode_texts(model: Any, prefix: Sequence[int], dynamics: Sequence[Sequence[int]], *, stop: Collection[int],
                 max_new_tokens: int, greedy: bool = False, temperature: float = 1.0,
                 generator: torch.Generator | None = None) -> tuple[list[tuple[int, ...]], TextScores]:
    """Write one output per prompt (``prefix`` + ``dynamics[b]``) over the whole vocabulary; returns
    the token ids (the stop token included when one was written) and their scores."""
    _check(model, prefix, dynamics, max_new_tokens, temperature)
    head = output_head(model)
    B = len(dynamics)
    batch = KVBatch(model, prefix, B)
    hidden = batch.feed([list(d) for d in dynamics])
    dev = hidden.device
    value_hidden = hidden[torch.arange(B, device=dev), torch.tensor([len(d) - 1 for d in dynamics], device=dev)]
    last = value_hidden
    tokens: list[list[int]] = [[] for _ in range(B)]
    logp = torch.zeros(B, max_new_tokens, device=dev)
    entropy = torch.zeros(B, max_new_tokens, device=dev)
    active = list(range(B))
    for t in range(max_new_tokens):
        dist = _vocab_logp(last, head, temperature)  # [A, V]
        picked = pick_tokens(dist, greedy, generator)
        rows = torch.tensor(active, device=dev)
        logp[rows, t] = dist[torch.arange(len(active), device=dev), torch.tensor(picked, device=dev)]
        entropy[rows, t] = _entropy(dist)
        for b, tok in zip(active, picked):
            tokens[b].append(tok)
        active = [b for b in active if tokens[b][-1] not in stop]
        if not active or t == max_new_tokens - 1:
            break
        now = set(active)
        hidden = batch.feed([[tokens[b][-1]] if b in now else [] for b in range(B)])
        last = hidden[torch.tensor(active, device=dev), 0]
    T = max(map(len, tokens))
    mask = torch.arange(T, device=dev)[None] < torch.tensor([len(x) for x in tokens], device=dev)[:, None]
    return [tuple(x) for x in tokens], TextScores(logp[:, :T] * mask, entropy[:, :T] * mask, mask, value_hidden)


def score_texts(model: Any, prefix: Sequence[int], dynamics: Sequence[Sequence[int]],
                outputs: Sequence[Sequence[int]], *, temperature: float = 1.0) -> TextScores:
    """Per-token log-probs, entropies and full distributions of given outputs, in one teacher-forced
    pass (with gradients when enabled); equal to ``decode_texts``'s values."""
    if len(outputs) != len(dynamics) or any(not o for o in outputs):
        raise TeamTRError(f"score_texts got {len(outputs)} outputs for {len(dynamics)} prompts (each non-empty).")
    _check(model, prefix, dynamics, max(map(len, outputs)), temperature)
    B, T = len(outputs), max(map(len, outputs))
    hidden = KVBatch(model, prefix, B).feed([list(d) + list(o[:-1]) for d, o in zip(dynamics, outputs)])
    dev = hidden.device
    lengths = torch.tensor([len(o) for o in outputs], device=dev)
    mask = torch.arange(T, device=dev)[None] < lengths[:, None]
    start = torch.tensor([len(d) - 1 for d in dynamics], device=dev)
    at = (start[:, None] + torch.arange(T, device=dev)[None]).clamp(max=hidden.shape[1] - 1)
    rows = hidden[torch.arange(B, device=dev)[:, None], at]  # [B, T, H]
    full = _vocab_logp(rows, output_head(model), temperature)  # [B, T, V]
    ids = torch.tensor([list(o) + [0] * (T - len(o)) for o in outputs], device=dev)
    logp = full.gather(2, ids[..., None]).squeeze(-1) * mask
    return TextScores(logp, _entropy(full) * mask, mask, hidden[torch.arange(B, device=dev), start], full)


def stop_ids(coordinator: Coordinator) -> frozenset[int]:
    """The tokens that end a free-text output: the chat format's end marker and the end of sequence."""
    eos = coordinator.tokenizer.eos_token_id
    return frozenset([*coordinator.end_ids, *([int(eos)] if eos is not None else [])])


def parse_lines(decision: DecisionLike, text: str) -> list[int] | None:
    """The candidate indices a free text orders (``Team.step``'s whole-team lines; carry-on lines left
    out), or ``None`` when it names nothing the state's grammar allows: an invalid directive."""
    from teamtr.policy.whole_team import team_grammar

    grammar, sources = team_grammar(decision)
    choice = parse_free_text(grammar, text)
    if choice is None:
        return None
    return [sources[a][o] for a, o in enumerate(choice) if sources[a][o] >= 0]


@dataclass
class FreeTextOutput:
    """B free-text decisions: texts, their parsed lines (None: invalid), tokens, prompts, per-token
    scores (row b: decision b), values [B]."""

    texts: list[str]
    lines: list[list[int] | None]
    tokens: list[tuple[int, ...]]
    prompts: list[tuple[tuple[int, ...], tuple[int, ...]]]  # (static prefix, dynamic part) per row
    scores: TextScores
    values: torch.Tensor


def text_of(coordinator: Coordinator, tokens: Sequence[int]) -> str:
    """The text of an output: its tokens without the stop token and special tokens."""
    body = list(tokens[:-1]) if tokens and tokens[-1] in stop_ids(coordinator) else list(tokens)
    return str(coordinator.tokenizer.decode(body, skip_special_tokens=True))


@torch.no_grad()
def act_free_text(coordinator: Coordinator, decisions: Sequence[DecisionLike], *, max_new_tokens: int,
                  greedy: bool = False, generator: torch.Generator | None = None) -> FreeTextOutput:
    """Write one free-text directive per decision, all in one KV-cached batch (rows under different
    static prefixes folded, ``decoding.fold_prefixes``)."""
    enc = coordinator.encode(decisions)
    prompts = [(prefix, tuple(e.dynamic)) for prefix, e in enc]
    prefix, dynamics = fold_prefixes([p for p, _ in prompts], [d for _, d in prompts])
    tokens, scores = decode_texts(coordinator.backbone.model, prefix, dynamics, stop=stop_ids(coordinator),
                                  max_new_tokens=max_new_tokens, greedy=greedy,
                                  temperature=coordinator.temperature, generator=generator)
    values = coordinator.value_head(scores.value_hidden.float()).squeeze(-1).cpu()
    texts = [text_of(coordinator, t) for t in tokens]
    lines = [parse_lines(d, text) for d, text in zip(decisions, texts)]
    return FreeTextOutput(texts, lines, list(tokens), prompts, scores, values)
