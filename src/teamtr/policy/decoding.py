"""Whole-team directives by grammar-constrained decoding: valid by construction, exact log-probs.

The output of a whole-team decision is one line per agent (``policy.grammar.DirectiveGrammar``). As
token ids it is, by definition (the rule ``prompts.py`` sets for candidates), the concatenation of
separately tokenised pieces: line 1, separator, line 2, ..., separator, line n, end marker. Each agent's
lines, each followed by its terminator (the separator, or the end marker for the last agent), form a
**token trie**; the tries are chained (a leaf of agent i leads to the root of agent i+1): the
``policy.grammar.Automaton`` of the grammar.

Policy. At every output token the model's logits (divided by ``temperature``) are restricted to the
trie's valid next tokens and renormalised: pi(token | prompt, output so far) = softmax over the valid
tokens only. The probability of an output is the product of its tokens' probabilities, so pi is an
exact distribution over the whole-team outputs (it sums to 1 over the k^n of them) without their
enumeration; every sampled output is valid, and its log-prob, per-token log-probs and per-token
entropies are exact. Only the valid tokens' logits are computed (hidden state . their output rows, in
float32), never the whole vocabulary.

Jump-forward. A token with one valid continuation (the "agent_B:" opening every line of agent_B, the
separator, the end marker) has probability 1, log-prob 0 and entropy 0 and needs no logits. Each model
call feeds, per row, the token just chosen plus the forced run after it, so a decision costs one call
per *branching point* (plus the prompt's), not one per token.

Batching. One KV cache serves B rows (different prompts and grammars). The static prefix is encoded
once at batch 1 and repeated over the rows. Each call then appends, per row, a chunk of its own length,
right-padded to the longest chunk: padded slots are zero in the 2D attention mask, so no later query
ever attends them, and position ids count each row's real tokens only, so each row computes exactly
"prefix + its own tokens" at positions 0..n-1. Rows under different static prefixes (fresh names per
episode, a list of layouts) share one cache too: ``fold_prefixes`` moves each row's prefix into its own
first chunk (no shared prefix), so a batch is one decoding loop whatever its prefixes, at the cost of
each row encoding its prefix. Left padding cannot serve: chunk lengths differ at every
step (jump-forward), so holes are unavoidable; a masked hole costs a little compute, never exactness. A
cache per row would cost B model calls per step, B times the per-call overhead that dominates on CPU.

``score_outputs`` recomputes the same per-token values with gradients in one teacher-forced pass (the
token-level PPO update); ``tests/test_decoding.py`` checks both against the model's own full-sequence
logits, and that the distribution over all outputs of small grammars sums to 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from teamtr.core import TeamTRError
from teamtr.policy.grammar import Automaton, TokenGrammar, automaton


@dataclass(frozen=True)
class GrammarDecision:
    """One whole-team decision as token ids: the dynamic prompt part and the grammar of its output."""

    dynamic: tuple[int, ...]
    grammar: TokenGrammar


def fold_prefixes(prefixes: Sequence[Sequence[int]], dynamics: Sequence[Sequence[int]]
                  ) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """One batch's shared prefix and each row's own tokens after it: the common prefix when every row
    has the same one, else none, each row's prefix put before its dynamic part (the same tokens at the
    same positions, so the same scores; module docstring, Batching)."""
    first = tuple(prefixes[0]) if prefixes else ()
    if all(tuple(p) == first for p in prefixes):
        return first, [tuple(d) for d in dynamics]
    return (), [tuple(p) + tuple(d) for p, d in zip(prefixes, dynamics)]


def fold_decisions(decisions: Sequence[tuple[Sequence[int], GrammarDecision]]
                   ) -> tuple[tuple[int, ...], list[GrammarDecision]]:
    """``fold_prefixes`` for (static prefix, ``GrammarDecision``) pairs."""
    prefix, dynamics = fold_prefixes([p for p, _ in decisions], [d.dynamic for _, d in decisions])
    return prefix, [GrammarDecision(dyn, d.grammar) for dyn, (_, d) in zip(dynamics, decisions)]


@dataclass
class TokenScores:
    """Per-token values of B outputs under the masked policy. T = longest output; N = branching
    tokens of all rows (those where the grammar allowed more than one token), in (row, position)
    order; K = most valid tokens at one of them.

    ``logp``/``entropy`` are 0 at forced tokens (one valid continuation) and at padding. The
    ``branch_*`` fields hold the whole masked distribution at each branching token, so that the
    per-token KL between two policies is exact: ``rl.losses.categorical_kl(old.branch_logp,
    new.branch_logp, old.branch_mask)``.
    """

    logp: torch.Tensor  # [B, T] log pi(token | prompt, output so far)
    entropy: torch.Tensor  # [B, T] entropy of the masked next-token distribution
    mask: torch.Tensor  # [B, T] bool: a real output token
    branching: torch.Tensor  # [B, T] bool: the grammar allowed more than one token here
    value_hidden: torch.Tensor  # [B, H] final-norm hidden state at each prompt's last token
    branch_logp: torch.Tensor  # [N, K] masked log-probs of the valid tokens (-inf at padding)
    branch_mask: torch.Tensor  # [N, K] bool: a valid token
    branch_index: torch.Tensor  # [N, 2] long: (row, position) of each branching token
    branch_choice: torch.Tensor  # [N] long: the index in its row of branch_logp of the token taken

    @property
    def total(self) -> torch.Tensor:
        """[B] log pi(output | prompt): the sum of the output's token log-probs."""
        return self.logp.sum(-1)


@dataclass
class DecodeOutput:
    """What ``decode`` chose: per row the option index per agent and the token ids, and their scores."""

    choices: list[tuple[int, ...]]
    tokens: list[tuple[int, ...]]
    scores: TokenScores


class _Row:
    """One output being decoded (or walked): its automaton state and per-token record."""

    def __init__(self, auto: Automaton) -> None:
        self.auto, self.state = auto, (0, 0)
        self.tokens: list[int] = []
        self.choice: list[int] = []

    @property
    def done(self) -> bool:
        return self.auto.done(self.state)

    def emit(self, token: int) -> None:
        self.state, opt = self.auto.advance(self.state, token)
        self.tokens.append(token)
        if opt >= 0:
            self.choice.append(opt)

    def run_forced(self) -> list[int]:
        """Emit the tokens that have a single valid continuation, up to the next branching point."""
        run = []
        while not self.done:
            valid = self.auto.valid(self.state)
            if len(valid) > 1:
                break
            self.emit(valid[0])
            run.append(valid[0])
        return run


class KVBatch:
    """One KV cache for B rows: the shared prefix once, then right-padded chunks (module docstring)."""

    def __init__(self, model: Any, prefix: Sequence[int], batch: int) -> None:
        self.base = model.model
        self.device = model.get_output_embeddings().weight.device
        params = inspect.signature(self.base.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.cache: Any = None  # the model makes its own (a DynamicCache) on the first call
        self.P = len(prefix)
        self.att = torch.ones(batch, self.P, dtype=torch.long, device=self.device)
        self.fed = [0] * batch
        if self.P:
            ids = torch.tensor([list(prefix)], device=self.device)
            self._call(ids, self.att[:1], torch.arange(self.P, device=self.device)[None])
            self.cache.batch_repeat_interleave(batch)

    def _call(self, ids: torch.Tensor, att: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        out = self.base(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True,
                        **{self.cache_kw: self.cache})
        self.cache = getattr(out, self.cache_kw)
        return out.last_hidden_state

    def feed(self, chunks: Sequence[Sequence[int]]) -> torch.Tensor:
        """Append each row's chunk (any length, empty for a finished row); returns the final-norm
        hidden states [B, W, H], W = longest chunk (rows' padded slots hold junk)."""
        B, W = len(chunks), max(len(c) for c in chunks)
        ids = torch.zeros(B, W, dtype=torch.long)
        real = torch.zeros(B, W, dtype=torch.long)
        pos = torch.zeros(B, W, dtype=torch.long)
        for b, chunk in enumerate(chunks):
            n = len(chunk)
            ids[b, :n] = torch.tensor(chunk, dtype=torch.long)
            real[b, :n] = 1
            pos[b] = self.P + self.fed[b] + torch.arange(W).clamp(max=max(n - 1, 0))
            self.fed[b] += n
        self.att = torch.cat([self.att, real.to(self.device)], dim=1)
        return self._call(ids.to(self.device), self.att, pos.to(self.device))


def output_head(model: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    head = model.get_output_embeddings()
    if not isinstance(head, nn.Linear):
        raise TeamTRError(f"The output layer of {type(model).__name__} is a {type(head).__name__}, not a "
                          "plain Linear; constrained decoding reads its rows (do not put LoRA on lm_head).")
    return head.weight, head.bias


def _masked(hidden: torch.Tensor, valid: Sequence[Sequence[int]], head: tuple[torch.Tensor, torch.Tensor | None],
            temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked next-token log-probs [N, K] (-inf at padding) and the valid mask [N, K] from hidden
    states [N, H] and each position's valid token ids (K: the most of them)."""
    K = max(len(v) for v in valid)
    ids = torch.tensor([list(v) + [0] * (K - len(v)) for v in valid], device=hidden.device)
    ok = torch.tensor([[k < len(v) for k in range(K)] for v in valid], device=hidden.device)
    weight, bias = head
    logits = torch.einsum("nh,nkh->nk", hidden.float(), weight[ids].float())
    if bias is not None:
        logits = logits + bias[ids].float()
    return torch.log_softmax((logits / temperature).masked_fill(~ok, float("-inf")), dim=-1), ok


def _check(model: Any, prefix: Sequence[int], decisions: Sequence[GrammarDecision], temperature: float) -> None:
    if not decisions:
        raise TeamTRError("Constrained decoding got no decisions; give at least one prompt and grammar.")
    if temperature <= 0:
        raise TeamTRError(f"temperature must be > 0, got {temperature}.")
    limit = int(getattr(model.config, "max_position_embeddings", 2048))
    for b, d in enumerate(decisions):
        if not d.dynamic:
            raise TeamTRError(f"Decision {b} has an empty prompt; the dynamic part must hold the state.")
        g = d.grammar
        longest = sum(max(map(len, opts)) for opts in g.lines) + len(g.separator) * (len(g.lines) - 1) + len(g.end)
        if len(prefix) + len(d.dynamic) + longest > limit:
            raise TeamTRError(f"Decision {b}: prompt ({len(prefix) + len(d.dynamic)} tokens) + longest output "
                              f"({longest} tokens) exceed the model's context of {limit}; shorten them.")


def _token_scores(lengths: Sequence[int], where: Sequence[tuple[int, int]], dist: torch.Tensor, ok: torch.Tensor,
                  picked: Sequence[int], value_hidden: torch.Tensor) -> TokenScores:
    """Lay out the branching tokens' distributions ``dist`` [N, K] (valid ``ok``, token taken
    ``picked``) at their (row, position) ``where`` over B outputs of ``lengths`` tokens."""
    dev = value_hidden.device
    B, T = len(lengths), max(lengths)
    mask = torch.arange(T, device=dev)[None] < torch.tensor(list(lengths), device=dev)[:, None]
    index = torch.tensor(list(where), dtype=torch.long, device=dev).reshape(-1, 2)
    choice = torch.tensor(list(picked), dtype=torch.long, device=dev)
    at = (index[:, 0], index[:, 1])
    chosen = dist.gather(1, choice[:, None]).squeeze(1)
    entropy = -(dist.exp() * dist.masked_fill(~ok, 0.0)).sum(-1)
    return TokenScores(
        logp=torch.zeros(B, T, device=dev).index_put(at, chosen),
        entropy=torch.zeros(B, T, device=dev).index_put(at, entropy),
        mask=mask,
        branching=torch.zeros(B, T, dtype=torch.bool, device=dev).index_put(at, choice >= 0),
        value_hidden=value_hidden, branch_logp=dist, branch_mask=ok, branch_index=index, branch_choice=choice,
    )


def pick_tokens(logp: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> list[int]:
    if greedy:
        return logp.argmax(-1).tolist()
    return torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(-1).tolist()


@torch.no_grad()
def decode(model: Any, prefix: Sequence[int], decisions: Sequence[GrammarDecision], *, greedy: bool = False,
           temperature: float = 1.0, generator: torch.Generator | None = None) -> DecodeOutput:
    """Decode one whole-team output per decision under its grammar's mask (module docstring).

    ``model``: a Llama-layout causal LM (``model.model`` the decoder, LoRA-wrapped or not). ``prefix``:
    the static prefix shared by every decision. Greedy takes the most likely valid token at each
    branching point; otherwise tokens are sampled with ``generator``. Log-probs are those of the
    masked policy at ``temperature`` either way.
    """
    _check(model, prefix, decisions, temperature)
    head = output_head(model)
    rows = [_Row(automaton(d.grammar)) for d in decisions]
    batch = KVBatch(model, prefix, len(rows))
    B, dev = len(rows), batch.device
    every = torch.arange(B, device=dev)
    chunks = [list(d.dynamic) + row.run_forced() for d, row in zip(decisions, rows)]
    hidden = batch.feed(chunks)
    value_hidden = hidden[every, torch.tensor([len(d.dynamic) - 1 for d in decisions], device=dev)]
    steps: list[tuple[list[int], torch.Tensor, torch.Tensor]] = []  # (rows, dist, ok) per step
    where: list[tuple[int, int]] = []
    picked: list[int] = []
    while True:
        active = [b for b in range(B) if not rows[b].done]
        if not active:
            break
        last = hidden[torch.tensor(active, device=dev), torch.tensor([len(chunks[b]) - 1 for b in active], device=dev)]
        valid = [rows[b].auto.valid(rows[b].state) for b in active]
        dist, ok = _masked(last, valid, head, temperature)
        steps.append((active, dist, ok))
        chunks = [[] for _ in range(B)]
        for n, (b, k) in enumerate(zip(active, pick_tokens(dist, greedy, generator))):
            where.append((b, len(rows[b].tokens)))
            picked.append(k)
            rows[b].emit(valid[n][k])
            run = [valid[n][k]] + rows[b].run_forced()
            chunks[b] = [] if rows[b].done else run
        if any(chunks):
            hidden = batch.feed(chunks)
    return DecodeOutput([tuple(r.choice) for r in rows], [tuple(r.tokens) for r in rows],
                        _gathered(rows, steps, where, picked, value_hidden))


def _gathered(rows: Sequence[_Row], steps: Sequence[tuple[list[int], torch.Tensor, torch.Tensor]],
              where: list[tuple[int, int]], picked: list[int], value_hidden: torch.Tensor) -> TokenScores:
    """``decode``'s per-step distributions, padded to one K and put in (row, position) order."""
    dev = value_hidden.device
    if not where:
        dist, ok = torch.zeros(0, 1, device=dev), torch.zeros(0, 1, dtype=torch.bool, device=dev)
    else:
        K = max(d.shape[1] for _, d, _ in steps)
        dist = torch.cat([nn.functional.pad(d, (0, K - d.shape[1]), value=float("-inf")) for _, d, _ in steps])
        ok = torch.cat([nn.functional.pad(m, (0, K - m.shape[1]), value=False) for _, _, m in steps])
        order = sorted(range(len(where)), key=where.__getitem__)
        dist, ok = dist[order], ok[order]
        where, picked = [where[i] for i in order], [picked[i] for i in order]
    return _token_scores([len(r.tokens) for r in rows], where, dist, ok, picked, value_hidden)


def _walk(decisions: Sequence[GrammarDecision], outputs: Sequence[Sequence[int]]
          ) -> tuple[list[tuple[int, int]], list[list[int]], list[int]]:
    """Check each output against its grammar; return (row, position), valid ids and the chosen index
    of every branching token."""
    if len(outputs) != len(decisions):
        raise TeamTRError(f"score_outputs got {len(outputs)} outputs for {len(decisions)} decisions.")
    where: list[tuple[int, int]] = []
    valid: list[list[int]] = []
    picked: list[int] = []
    for b, (d, out) in enumerate(zip(decisions, outputs)):
        row = _Row(automaton(d.grammar))
        for t, tok in enumerate(out):
            options = [] if row.done else row.auto.valid(row.state)
            row.emit(int(tok))  # raises on a token the grammar does not allow here
            if len(options) > 1:
                where.append((b, t))
                valid.append(options)
                picked.append(options.index(int(tok)))
        if not row.done:
            raise TeamTRError(f"Output {b} stops before its grammar's end ({len(row.choice)} of "
                              f"{row.auto.n_agents} lines).")
    return where, valid, picked


def score_outputs(model: Any, prefix: Sequence[int], decisions: Sequence[GrammarDecision],
                  outputs: Sequence[Sequence[int]], *, temperature: float = 1.0) -> TokenScores:
    """Per-token masked log-probs and entropies of given outputs (``DecodeOutput.tokens``), with
    gradients (when enabled), in one teacher-forced batched pass; equal to ``decode``'s values.

    Raises ``TeamTRError`` when an output does not follow its decision's grammar.
    """
    _check(model, prefix, decisions, temperature)
    where, valid, picked = _walk(decisions, outputs)
    batch = KVBatch(model, prefix, len(decisions))
    hidden = batch.feed([list(d.dynamic) + list(out[:-1]) for d, out in zip(decisions, outputs)])
    dev = hidden.device
    value_hidden = hidden[torch.arange(len(decisions), device=dev),
                          torch.tensor([len(d.dynamic) - 1 for d in decisions], device=dev)]
    if where:
        rb = torch.tensor([b for b, _ in where], device=dev)
        at = torch.tensor([len(decisions[b].dynamic) - 1 + t for b, t in where], device=dev)
        dist, ok = _masked(hidden[rb, at], valid, output_head(model), temperature)
    else:
        dist, ok = torch.zeros(0, 1, device=dev), torch.zeros(0, 1, dtype=torch.bool, device=dev)
    return _token_scores([len(o) for o in outputs], where, dist, ok, picked, value_hidden)
