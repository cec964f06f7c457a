"""Exact, prefix-shared scoring of candidate directives.

For a batch of decisions (a shared static prefix, then per decision a dynamic prompt part and a
variable number of candidates) this returns every candidate's summed token log-probability
log p(candidate tokens | prefix + dynamic), exactly, with three savings over the naive
"one full pass per prompt x candidate" (what TWOSOME does):

1. the static prefix (system text, rules) is encoded once for the whole batch; its keys and values
   are expanded over the batch inside every attention layer (and memoised between calls while the
   weights do not change). Decisions may continue *different* prefixes (worlds whose task text names
   each episode's own agents and items: ``names: fresh``, a list of Overcooked layouts): the distinct
   prefixes are encoded together, right-padded, each memoised on its own, and every row attends to its
   own prefix's keys and values, so a batch is still one packed pass;
2. each decision is ONE packed row: its dynamic tokens, then its candidates as a **token trie**:
   candidates that start alike ("agent_B: fetch the map" / "agent_B: fetch the key") share the nodes
   of their common prefix. A 4D attention mask lets a trie node see the prefix, the dynamic part and
   its own ancestors only, and its position id is the depth after the prompt, so each candidate sees
   exactly the sequence "prefix + dynamic + its own tokens" (tree attention, as in SpecInfer/Medusa);
3. vocabulary logits are computed only at positions whose next token is scored (the prompt's last
   token and the trie's inner nodes), never for the whole sequence.

The same pass returns, per decision, the final-norm hidden state at the prompt's last token (for the
value head) and, on request, the hidden states entering layer ``capture_layer`` so that training can
re-run only the top layers (``train_layers``: N).

Supported: decoder-only models with the Llama layout (``model.model.{embed_tokens, layers, norm,
rotary_emb}`` and layers that call ``cache.update``): Llama, SmolLM, Mistral, Qwen2/3 and kin.
``check_exact`` compares against the model's own forward pass, so an unsupported architecture is
caught by a test, not trusted.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from teamtr.core import TeamTRError
from teamtr.policy.settings import NORMALIZATIONS


@dataclass
class EncodedDecision:
    """One decision as token ids: the dynamic prompt part and the candidates (end marker included)."""

    dynamic: tuple[int, ...]
    candidates: list[tuple[int, ...]]
    words: list[int]


@dataclass
class PackedBatch:
    """Tensors for one packed forward of B decisions (built by ``pack``; all on CPU until ``to``).

    Shapes: B decisions, L = longest row (dynamic + trie inner nodes), E edges (trie nodes, one
    scored token each), C = total candidates, Cmax = most candidates of one decision.
    """

    prefix: torch.Tensor  # [G, Pmax] the G distinct static prefixes' ids, right-padded with 0
    prefix_lengths: torch.Tensor  # [G] their lengths
    prefix_of: torch.Tensor  # [B] the prefix each decision continues (index into G)
    input_ids: torch.Tensor  # [B, L]
    positions: torch.Tensor  # [B, L] absolute position ids (after the decision's own prefix)
    row_mask: torch.Tensor  # [B, L, L] bool: query row may attend key row
    lengths: torch.Tensor  # [B] row lengths
    value_index: torch.Tensor  # [B] flat index (b*L + i) of each prompt's last token
    pred_index: torch.Tensor  # [N] flat indices of positions whose logits are needed
    edge_pred: torch.Tensor  # [E] index into pred_index predicting each edge's token
    edge_token: torch.Tensor  # [E]
    path_edge: torch.Tensor  # [K] edge of each (candidate, token) pair
    path_cand: torch.Tensor  # [K] candidate (flat, 0..C-1) of each pair
    cand_batch: torch.Tensor  # [C] decision of each candidate
    cand_slot: torch.Tensor  # [C] slot of each candidate within its decision
    n_tokens: torch.Tensor  # [B, Cmax] tokens per candidate (0 where padded)
    n_words: torch.Tensor  # [B, Cmax]
    cand_mask: torch.Tensor  # [B, Cmax] bool

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def prefix_keys(self) -> list[tuple[int, ...]]:
        """The distinct prefixes as token tuples, in the order of ``prefix``'s rows."""
        return [tuple(row[: int(n)].tolist()) for row, n in zip(self.prefix, self.prefix_lengths)]

    @property
    def tokens(self) -> int:
        """Tokens the packed pass feeds through the trunk (without the shared prefix)."""
        return int(self.lengths.sum())


@dataclass
class ScoreOutput:
    """Summed candidate log-probs and what the value head and training need."""

    sums: torch.Tensor  # [B, Cmax] sum of candidate token log-probs (0 where masked)
    n_tokens: torch.Tensor  # [B, Cmax]
    n_words: torch.Tensor  # [B, Cmax]
    mask: torch.Tensor  # [B, Cmax] bool
    value_hidden: torch.Tensor  # [B, H] final-norm hidden state at each prompt's last token
    captured_rows: torch.Tensor | None = None  # [B, L, H] hidden entering capture_layer
    captured_prefix: torch.Tensor | None = None  # [G, Pmax, H] (row g: its first prefix_lengths[g])

    def normalized(self, normalization: str) -> torch.Tensor:
        """Candidate scores: ``sum``, ``token`` (mean per token) or ``word`` (per word, TWOSOME)."""
        if normalization == "sum":
            return self.sums
        if normalization == "token":
            return self.sums / self.n_tokens.clamp(min=1)
        if normalization == "word":
            return self.sums / self.n_words.clamp(min=1)
        raise TeamTRError(f"policy.normalization {normalization!r} is not one of {', '.join(NORMALIZATIONS)}.")


def _trie(candidates: Sequence[tuple[int, ...]]) -> tuple[list[int], list[int], list[list[int]]]:
    """Token trie of the candidates: (parent of each node, token of each node, node path per candidate)."""
    parent: list[int] = []
    token: list[int] = []
    index: dict[tuple[int, int], int] = {}
    paths: list[list[int]] = []
    for cand in candidates:
        node, path = -1, []
        for tok in cand:
            key = (node, tok)
            if key not in index:
                index[key] = len(parent)
                parent.append(node)
                token.append(tok)
            node = index[key]
            path.append(node)
        paths.append(path)
    return parent, token, paths


@dataclass
class _Layout:
    """One decision's packed row and its trie, indices local to the decision (``pack`` offsets them).

    The row holds the dynamic tokens, then the trie's inner nodes (their outputs predict their
    children; leaves are never inputs). Trie node ``n`` is edge ``n``: one scored token.
    """

    tokens: list[int]  # [row length] input ids
    positions: list[int]  # [row length] absolute position ids (after the P prefix tokens)
    attends: list[list[int]]  # per row position, the row positions it may attend
    pred_rows: list[int]  # row positions whose logits are needed, the prompt's last token first
    edge_pred: list[int]  # per edge: index into pred_rows of the position predicting its token
    edge_token: list[int]  # per edge: its token
    paths: list[list[int]]  # per candidate: its edges, root first


def _check_decision(b: int, dec: EncodedDecision, P: int, max_positions: int) -> None:
    if not dec.candidates:
        raise TeamTRError(f"Decision {b} has an empty candidate list; every state needs candidates.")
    if not dec.dynamic:
        raise TeamTRError(f"Decision {b} has an empty prompt; the dynamic part must hold the state.")
    D = len(dec.dynamic)
    longest = max(len(c) for c in dec.candidates)
    if P + D + longest > max_positions:
        worst = max(range(len(dec.candidates)), key=lambda j: len(dec.candidates[j]))
        raise TeamTRError(
            f"Decision {b}: prompt ({P + D} tokens) + candidate {worst} ({longest} tokens) exceed the "
            f"model's context of {max_positions} tokens; shorten the state text or the candidate."
        )
    if any(len(c) == 0 for c in dec.candidates):
        raise TeamTRError(f"Decision {b} has an empty candidate; every candidate needs text.")


def _layout(dec: EncodedDecision, P: int) -> _Layout:
    """Tree attention for one decision: a trie node at depth d sits at position P + D + d and sees
    the dynamic part and its own ancestors (the prefix is seen by every row)."""
    parent, token, paths = _trie(dec.candidates)
    has_child = [False] * len(parent)
    for p in parent:
        if p >= 0:
            has_child[p] = True
    D = len(dec.dynamic)
    row_of: dict[int, int] = {}  # inner trie node -> its row position
    tokens, positions = list(dec.dynamic), [P + i for i in range(D)]
    attends = [list(range(i + 1)) for i in range(D)]
    depth = [0] * len(parent)
    for n, p in enumerate(parent):
        depth[n] = 0 if p < 0 else depth[p] + 1
        if has_child[n]:
            row_of[n] = len(tokens)
            tokens.append(token[n])
            positions.append(P + D + depth[n])
            ancestors, a = [], n
            while a >= 0:
                ancestors.append(row_of[a])
                a = parent[a]
            attends.append(list(range(D)) + ancestors)
    pred_rows = [D - 1] + [row_of[n] for n in row_of]
    slot_of_row = {r: slot for slot, r in enumerate(pred_rows)}
    edge_pred = [slot_of_row[D - 1 if p < 0 else row_of[p]] for p in parent]
    return _Layout(tokens, positions, attends, pred_rows, edge_pred, token, paths)


def _row_tensors(layouts: Sequence[_Layout], L: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids`` [B, L], ``positions`` [B, L] and ``row_mask`` [B, L, L], zero-padded."""
    B = len(layouts)
    input_ids = torch.zeros(B, L, dtype=torch.long)
    positions = torch.zeros(B, L, dtype=torch.long)
    row_mask = torch.zeros(B, L, L, dtype=torch.bool)
    for b, lay in enumerate(layouts):
        n = len(lay.tokens)
        input_ids[b, :n] = torch.tensor(lay.tokens)
        positions[b, :n] = torch.tensor(lay.positions)
        q = torch.tensor([i for i, a in enumerate(lay.attends) for _ in a])
        k = torch.tensor([j for a in lay.attends for j in a])
        row_mask[b, q, k] = True
    return input_ids, positions, row_mask


def _candidate_counts(decisions: Sequence[EncodedDecision]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n_tokens``, ``n_words`` [B, Cmax] float (0 where padded) and ``cand_mask`` [B, Cmax] bool."""
    B, cmax = len(decisions), max(len(d.candidates) for d in decisions)
    n_tokens = torch.zeros(B, cmax)
    n_words = torch.zeros(B, cmax)
    cand_mask = torch.zeros(B, cmax, dtype=torch.bool)
    for b, dec in enumerate(decisions):
        c = len(dec.candidates)
        n_tokens[b, :c] = torch.tensor([len(x) for x in dec.candidates], dtype=torch.float)
        n_words[b, :c] = torch.tensor(list(dec.words), dtype=torch.float)
        cand_mask[b, :c] = True
    return n_tokens, n_words, cand_mask


def pack(prefix: Sequence[int], decisions: Sequence[EncodedDecision], max_positions: int) -> PackedBatch:
    """Lay out B decisions that share one static prefix (see ``pack_prefixed``)."""
    return pack_prefixed([prefix] * len(decisions), decisions, max_positions)


def pack_prefixed(prefixes: Sequence[Sequence[int]], decisions: Sequence[EncodedDecision],
                  max_positions: int) -> PackedBatch:
    """Lay out B decisions, decision b continuing static prefix ``prefixes[b]``, as packed rows with
    trie-shared candidates (see the module docstring): per-decision layouts, then their local indices
    offset into flat gather indices over the batch. Equal prefixes are stored (and encoded) once."""
    if not decisions:
        raise TeamTRError("pack() got no decisions; give at least one state to score.")
    if len(prefixes) != len(decisions):
        raise TeamTRError(f"pack_prefixed() got {len(prefixes)} prefixes for {len(decisions)} decisions.")
    distinct: dict[tuple[int, ...], int] = {}
    prefix_of = [distinct.setdefault(tuple(p), len(distinct)) for p in prefixes]
    layouts = []
    for b, dec in enumerate(decisions):
        P = len(prefixes[b])
        _check_decision(b, dec, P, max_positions)
        layouts.append(_layout(dec, P))
    L = max(len(lay.tokens) for lay in layouts)
    pred_index: list[int] = []
    edge_pred: list[int] = []
    edge_token: list[int] = []
    path_edge: list[int] = []
    path_cand: list[int] = []
    cand_batch: list[int] = []
    cand_slot: list[int] = []
    for b, lay in enumerate(layouts):
        slot0, edge0 = len(pred_index), len(edge_token)
        pred_index += [b * L + r for r in lay.pred_rows]
        edge_pred += [slot0 + slot for slot in lay.edge_pred]
        edge_token += lay.edge_token
        for j, path in enumerate(lay.paths):
            path_edge += [edge0 + e for e in path]
            path_cand += [len(cand_batch)] * len(path)
            cand_batch.append(b)
            cand_slot.append(j)
    input_ids, positions, row_mask = _row_tensors(layouts, L)
    n_tokens, n_words, cand_mask = _candidate_counts(decisions)
    keys = list(distinct)
    prefix = torch.zeros(len(keys), max(len(k) for k in keys), dtype=torch.long)
    for g, k in enumerate(keys):
        prefix[g, : len(k)] = torch.tensor(k, dtype=torch.long)
    return PackedBatch(
        prefix=prefix,
        prefix_lengths=torch.tensor([len(k) for k in keys]),
        prefix_of=torch.tensor(prefix_of),
        input_ids=input_ids,
        positions=positions,
        row_mask=row_mask,
        lengths=torch.tensor([len(lay.tokens) for lay in layouts]),
        value_index=torch.tensor([b * L + lay.pred_rows[0] for b, lay in enumerate(layouts)]),
        pred_index=torch.tensor(pred_index),
        edge_pred=torch.tensor(edge_pred),
        edge_token=torch.tensor(edge_token),
        path_edge=torch.tensor(path_edge),
        path_cand=torch.tensor(path_cand),
        cand_batch=torch.tensor(cand_batch),
        cand_slot=torch.tensor(cand_slot),
        n_tokens=n_tokens,
        n_words=n_words,
        cand_mask=cand_mask,
    )


@contextmanager
def double_backward_attention() -> Iterator[None]:
    """Scoring passes inside this block can be differentiated twice (TRPO's Fisher-vector products).

    SDPA's fused kernels (flash, memory-efficient) have no double backward; its math kernel is built
    of plain differentiable ops (eager attention needs nothing). Enter it around the ``evaluate``
    calls handed to ``teamtr.rl`` TRPO.
    """
    with sdpa_kernel([SDPBackend.MATH]):
        yield


class _RecordKV:
    """Cache stand-in for the prefix pass: remembers the layer's keys and values."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.k, self.v = k, v
        return k, v


class _PrefixKV:
    """Cache stand-in for the packed rows: prepends each row's prefix keys and values ([G, ...]
    prefixes; ``rows``: the prefix of each row, or None when one prefix is shared by all)."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, batch: int, rows: torch.Tensor | None) -> None:
        if rows is None:
            self.k = k.expand(batch, -1, -1, -1)
            self.v = v.expand(batch, -1, -1, -1)
        else:
            self.k = k.index_select(0, rows)
            self.v = v.index_select(0, rows)

    def update(self, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)


@dataclass
class _Encoded:
    """One prefix through layers ``start..``: keys and values per layer ([1, heads, P, d]) and the
    hidden state entering layer ``capture`` ([1, P, H]) when one was asked for."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    capture: int | None = None
    hidden: torch.Tensor | None = None


class _PrefixMemo:
    """Encoded prefixes between calls while the weights do not change (``invalidate`` drops them),
    least recently used first out beyond ``capacity`` (never one the current call uses)."""

    capacity = 64

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[tuple[int, ...], int], _Encoded] = OrderedDict()

    def get(self, key: tuple[int, ...], start: int, capture: int | None) -> _Encoded | None:
        entry = self.entries.get((key, start))
        if entry is None or (capture is not None and entry.capture != capture):
            return None
        self.entries.move_to_end((key, start))
        return entry

    def put(self, key: tuple[int, ...], start: int, entry: _Encoded, keep: int) -> None:
        self.entries[(key, start)] = entry
        self.entries.move_to_end((key, start))
        while len(self.entries) > max(self.capacity, keep):
            self.entries.popitem(last=False)


class CandidateScorer:
    """Scores packed batches on a Llama-layout causal LM (LoRA-wrapped or not)."""

    def __init__(self, model: Any) -> None:
        base = getattr(model, "model", None)
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if base is None or not all(hasattr(base, a) for a in needed):
            raise TeamTRError(
                f"{type(model).__name__} does not have the Llama decoder layout (model.model.embed_tokens, "
                "layers, norm, rotary_emb) that prefix-shared scoring needs; use a Llama, SmolLM, Mistral "
                "or Qwen-family model."
            )
        self.model = model
        self.base = base
        self.layers = list(base.layers)
        self.lm_head = model.get_output_embeddings()
        params = inspect.signature(self.layers[0].forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 2048))
        self._memo = _PrefixMemo()
        self._head32: tuple[Any, torch.Tensor, torch.Tensor | None] | None = None  # float32 output layer

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def invalidate(self) -> None:
        """Forget memoised prefix keys/values: call after the weights change."""
        self._memo = _PrefixMemo()

    @property
    def memoised_prefixes(self) -> int:
        """Encoded prefixes held for the next call (tests and benchmarks read it)."""
        return len(self._memo.entries)

    def _layer(self, i: int, h: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any) -> torch.Tensor:
        rope = self.base.rotary_emb(h, pos)
        out = self.layers[i](
            h, attention_mask=mask, position_ids=pos, position_embeddings=rope, **{self._cache_kw: cache}
        )
        return out[0] if isinstance(out, tuple) else out

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """Output logits in float32 whatever the trunk's dtype: bfloat16 logits of size ~20 carry
        ~0.1 nat of rounding, as large as a PPO step; the output layer is a small share of the FLOPs."""
        if h.dtype == torch.float32:
            return self.lm_head(h)
        w, b = self.lm_head.weight, self.lm_head.bias
        key = (w.data_ptr(), w._version, None if b is None else b._version)
        if self._head32 is None or self._head32[0] != key:  # upcast once, not per call (~110 MB for SmolLM2)
            self._head32 = (key, w.detach().float(), None if b is None else b.detach().float())
        return nn.functional.linear(h.float(), self._head32[1], self._head32[2])

    def _additive(self, allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # A float mask works for every attention implementation (eager adds it, SDPA accepts it);
        # finfo.min rather than -inf keeps fully masked padding rows finite.
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)[:, None]

    def _encode_prefixes(self, ids: torch.Tensor, lengths: torch.Tensor, start: int,
                         prefix_hidden: torch.Tensor | None,
                         capture: int | None) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
        """Run G right-padded prefixes ([G, Pmax] ids, or the hidden states entering ``start``)
        through layers start..: keys/values per layer [G, heads, Pmax, d], hidden entering ``capture``."""
        device = self.lm_head.weight.device
        G, P = ids.shape
        pos = torch.arange(P, device=device)[None].expand(G, -1)
        h = self.base.embed_tokens(ids.to(device)) if prefix_hidden is None else prefix_hidden
        allowed = torch.ones(P, P, dtype=torch.bool, device=device).tril()[None].expand(G, -1, -1)
        if G > 1 or int(lengths.min()) < P:  # padded keys are never attended
            allowed = allowed & (torch.arange(P, device=device)[None] < lengths.to(device)[:, None])[:, None, :]
        mask = self._additive(allowed, h.dtype)
        kv, captured = [], None
        for i in range(start, self.num_layers):
            if i == capture:
                captured = h
            rec = _RecordKV()
            h = self._layer(i, h, mask, pos, rec)
            kv.append((rec.k, rec.v))
        return kv, captured

    def _prefix(self, packed: PackedBatch, start: int, prefix_hidden: torch.Tensor | None,
                capture: int | None) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
        """The batch's prefixes through layers start.., padded to [G, ...] (see ``_encode_prefixes``);
        without a gradient each prefix is memoised on its own, so only prefixes not seen since the
        weights last changed are encoded, together in one pass."""
        if torch.is_grad_enabled():
            return self._encode_prefixes(packed.prefix, packed.prefix_lengths, start, prefix_hidden, capture)
        keys = packed.prefix_keys
        found = [self._memo.get(k, start, capture) for k in keys]
        missing = [g for g, e in enumerate(found) if e is None]
        if missing:
            rows = torch.tensor(missing)
            lengths = packed.prefix_lengths[rows]
            width = int(lengths.max())
            given = None if prefix_hidden is None else prefix_hidden[rows.to(prefix_hidden.device), :width]
            kv, captured = self._encode_prefixes(packed.prefix[rows, :width], lengths, start, given, capture)
            for j, g in enumerate(missing):
                n = int(lengths[j])
                found[g] = _Encoded([(k[j:j + 1, :, :n], v[j:j + 1, :, :n]) for k, v in kv], capture,
                                    None if captured is None else captured[j:j + 1, :n])
                self._memo.put(keys[g], start, found[g], keep=len(keys))
        entries = [e for e in found if e is not None]
        if len(entries) == 1:
            return entries[0].kv, entries[0].hidden
        width = int(packed.prefix.shape[1])

        def padded(parts: list[torch.Tensor], dim: int) -> torch.Tensor:
            return torch.cat([nn.functional.pad(x, (0, 0) * (x.dim() - 1 - dim) + (0, width - x.shape[dim]))
                              for x in parts])

        kv = [(padded([e.kv[n][0] for e in entries], 2), padded([e.kv[n][1] for e in entries], 2))
              for n in range(len(entries[0].kv))]
        hidden = padded([e.hidden for e in entries], 1) if capture is not None else None  # type: ignore[misc]
        return kv, hidden

    def forward(
        self,
        packed: PackedBatch,
        *,
        start_layer: int = 0,
        rows_hidden: torch.Tensor | None = None,
        prefix_hidden: torch.Tensor | None = None,
        capture_layer: int | None = None,
    ) -> ScoreOutput:
        """Score a packed batch. With ``rows_hidden`` [B, L, H] and ``prefix_hidden`` [G, Pmax, H]
        (the hidden states entering ``start_layer``), only layers ``start_layer..`` run."""
        device = self.lm_head.weight.device
        B, L = packed.input_ids.shape
        if start_layer and (rows_hidden is None or prefix_hidden is None):
            raise TeamTRError("start_layer > 0 needs the cached rows_hidden and prefix_hidden.")
        kv, pre_hidden = self._prefix(packed, start_layer, prefix_hidden, capture_layer)
        G, P = packed.prefix.shape
        rows = None if G == 1 else packed.prefix_of.to(device)
        h = self.base.embed_tokens(packed.input_ids.to(device)) if rows_hidden is None else rows_hidden
        seen = (torch.arange(P)[None] < packed.prefix_lengths[:, None])[packed.prefix_of]  # [B, P]
        allowed = torch.cat(
            [seen[:, None, :].expand(B, L, P), packed.row_mask], dim=2
        ).to(device)
        mask = self._additive(allowed, h.dtype)
        pos = packed.positions.to(device)
        captured = None
        for n, i in enumerate(range(start_layer, self.num_layers)):
            if i == capture_layer:
                captured = h
            h = self._layer(i, h, mask, pos, _PrefixKV(kv[n][0], kv[n][1], B, rows))
        flat = self.base.norm(h).reshape(B * L, -1)
        value_hidden = flat[packed.value_index.to(device)]
        logits = self._logits(flat[packed.pred_index.to(device)])
        logp = torch.log_softmax(logits, dim=-1)
        edge_logp = logp[packed.edge_pred.to(device), packed.edge_token.to(device)]
        C = packed.cand_batch.numel()
        cand = torch.zeros(C, device=device).index_add(
            0, packed.path_cand.to(device), edge_logp[packed.path_edge.to(device)]
        )
        sums = torch.zeros(packed.cand_mask.shape, device=device, dtype=cand.dtype).index_put(
            (packed.cand_batch.to(device), packed.cand_slot.to(device)), cand
        )
        return ScoreOutput(
            sums=sums,
            n_tokens=packed.n_tokens.to(device),
            n_words=packed.n_words.to(device),
            mask=packed.cand_mask.to(device),
            value_hidden=value_hidden,
            captured_rows=captured,
            captured_prefix=pre_hidden if capture_layer is not None else None,
        )


def score_naive(model: Any, prefix: Sequence[int], decisions: Sequence[EncodedDecision],
                batch_size: int = 64) -> list[list[float]]:
    """The reference: one full forward pass per (prompt, candidate) pair, as TWOSOME scores.

    Used by the tests (exactness) and the benchmark (speed baseline), never by training.
    """
    device = model.get_output_embeddings().weight.device
    seqs: list[tuple[list[int], int]] = []
    for dec in decisions:
        prompt = list(prefix) + list(dec.dynamic)
        for cand in dec.candidates:
            seqs.append((prompt + list(cand), len(prompt)))
    out: list[float] = []
    for s in range(0, len(seqs), batch_size):
        chunk = seqs[s : s + batch_size]
        L = max(len(x) for x, _ in chunk)
        ids = torch.zeros(len(chunk), L, dtype=torch.long)
        att = torch.zeros(len(chunk), L, dtype=torch.long)
        for r, (x, _) in enumerate(chunk):
            ids[r, : len(x)] = torch.tensor(x)
            att[r, : len(x)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=att.to(device)).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        for r, (x, start) in enumerate(chunk):
            tgt = torch.tensor(x[start:], device=device)
            out.append(float(logp[r, start - 1 : len(x) - 1].gather(1, tgt[:, None]).sum()))
    result, k = [], 0
    for dec in decisions:
        result.append(out[k : k + len(dec.candidates)])
        k += len(dec.candidates)
    return result
