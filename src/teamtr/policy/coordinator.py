"""The coordinator: backbone + LoRA on ``train_layers`` + value head, acting over candidate directives.

pi(c | s) = softmax_c(score(c | prompt) / temperature), score = the candidate's summed token log-prob,
normalised by ``normalization`` (``sum``, ``token`` or ``word``). Scores come from the prefix-shared,
trie-packed ``CandidateScorer``; the value head is linear on the final hidden state at the prompt's last
token, sharing the trunk.

``train_layers``: ``all`` (LoRA on every decoder layer, the default, chosen by measurement: see
``benchmarks/update.py``) or an int N (LoRA on the top N). With N, ``act(..., keep=True)`` stores the
hidden states entering the top N layers and ``evaluate`` re-runs only those layers.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from teamtr.core import TeamTRError
from teamtr.policy.backbone import Backbone
from teamtr.policy.prompts import ChatFormat, DecisionLike, TokenCache, candidate_texts, user_text, word_count
from teamtr.policy.scoring import CandidateScorer, EncodedDecision, pack

NORMALIZATIONS = ("sum", "token", "word")
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class LoraSettings:
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0  # 0: PPO's ratio must be exactly 1 before the first step
    target_modules: tuple[str, ...] = DEFAULT_TARGETS


@dataclass
class ActOutput:
    """Per decision: chosen index, full candidate log-prob vector, value, and a handle for training."""

    choices: list[int]
    logp: torch.Tensor  # [B, Cmax] log pi(c|s), -inf where masked
    mask: torch.Tensor  # [B, Cmax] bool
    values: torch.Tensor  # [B]
    handles: list[int] = field(default_factory=list)


@dataclass
class _Stored:
    prefix: tuple[int, ...]
    decision: EncodedDecision
    rows_hidden: torch.Tensor | None  # [len, H] entering the first trained layer (cached trunk)


def masked_log_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


class Coordinator(nn.Module):
    def __init__(
        self,
        backbone: Backbone,
        *,
        train_layers: int | str = "all",
        lora: LoraSettings | None = None,
        normalization: str = "token",
        temperature: float = 1.0,
        layer_lr_decay: float = 1.0,
        value_grad_to_trunk: bool = False,
    ) -> None:
        super().__init__()
        from peft import LoraConfig, get_peft_model

        if normalization not in NORMALIZATIONS:
            raise TeamTRError(f"policy.normalization {normalization!r} is not one of {', '.join(NORMALIZATIONS)}.")
        if temperature <= 0:
            raise TeamTRError(f"policy.temperature must be > 0, got {temperature}.")
        self.backbone = backbone
        self.tokenizer = backbone.tokenizer
        hf = backbone.model
        n_layers = len(hf.model.layers) if hasattr(hf, "model") and hasattr(hf.model, "layers") else 0
        if train_layers == "all":
            top = n_layers
        elif isinstance(train_layers, int) and not isinstance(train_layers, bool) and 1 <= train_layers <= n_layers:
            top = train_layers
        else:
            raise TeamTRError(
                f"model.train_layers {train_layers!r} must be 'all' or an integer from 1 to {n_layers} "
                f"(the number of decoder layers of {backbone.name})."
            )
        self.lora = lora or LoraSettings()
        self.train_layers = train_layers
        self.first_trained = n_layers - top
        self.normalization = normalization
        self.temperature = float(temperature)
        self.layer_lr_decay = float(layer_lr_decay)
        self.value_grad_to_trunk = bool(value_grad_to_trunk)
        self.n_layers = n_layers
        config = LoraConfig(
            r=self.lora.rank,
            lora_alpha=self.lora.alpha,
            lora_dropout=self.lora.dropout,
            target_modules=list(self.lora.target_modules),
            layers_to_transform=list(range(self.first_trained, n_layers)),
            layers_pattern="layers",
            bias="none",
        )
        self.peft = get_peft_model(hf, config)
        self.scorer = CandidateScorer(hf)  # peft replaced the Linear modules in place
        hidden = int(hf.config.hidden_size)
        self.value_head = nn.Linear(hidden, 1).to(device=backbone.device, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        self.chat = ChatFormat.from_tokenizer(self.tokenizer)
        self.tokens = TokenCache(self.tokenizer)
        end = self.tokens([self.chat.end])[0]
        self.end_ids: tuple[int, ...] = end[:1] if end else (int(self.tokenizer.eos_token_id),)
        self._store: list[_Stored] = []
        self._prefix_hidden: dict[tuple[int, ...], torch.Tensor] = {}

    # ----------------------------------------------------------------- encoding
    def encode(self, decisions: Sequence[DecisionLike]) -> list[tuple[tuple[int, ...], EncodedDecision]]:
        """Token ids of each decision: (static prefix, dynamic part + candidates). Tokenisation is
        cached, so the recurring task and candidate texts are tokenised once."""
        statics = [self.chat.head + d.task + self.chat.user_head for d in decisions]
        dynamics = [user_text(d) + self.chat.assistant_head for d in decisions]
        texts = [candidate_texts(d) for d in decisions]
        flat = [t for ts in texts for t in ts]
        ids = iter(self.tokens(flat))
        pre = self.tokens(statics)
        dyn = self.tokens(dynamics)
        out = []
        for d, ts in enumerate(texts):
            cands = [next(ids) + self.end_ids for _ in ts]
            out.append((pre[d], EncodedDecision(dyn[d], cands, [word_count(t) for t in ts])))
        return out

    def _groups(self, prefixes: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], list[int]]:
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prefixes):
            groups.setdefault(p, []).append(i)
        return groups

    def _run(self, prefix: tuple[int, ...], decs: list[EncodedDecision], capture: bool,
             hidden: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        packed = pack(prefix, decs, self.scorer.max_positions)
        kwargs: dict[str, Any] = {}
        if hidden is not None:
            B, L = packed.input_ids.shape
            rows = torch.zeros(B, L, hidden[0].shape[-1], dtype=hidden[0].dtype, device=self.backbone.device)
            for b, h in enumerate(hidden):
                rows[b, : h.shape[0]] = h
            kwargs = dict(start_layer=self.first_trained, rows_hidden=rows,
                          prefix_hidden=self._prefix_hidden[prefix])
        elif capture and self.first_trained > 0:
            kwargs = dict(capture_layer=self.first_trained)
        out = self.scorer.forward(packed, **kwargs)
        scores = out.normalized(self.normalization) / self.temperature
        # The value head reads the shared trunk; by default its loss does not move the adapter, so
        # early value errors (returns of +-10) cannot drag a behaviour-cloned policy around.
        hidden = out.value_hidden.float()
        values = self.value_head(hidden if self.value_grad_to_trunk else hidden.detach()).squeeze(-1)
        return scores, out.mask, values, (packed, out)

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def act(self, decisions: Sequence[DecisionLike], greedy: bool = False,
            generator: torch.Generator | None = None, keep: bool = False) -> ActOutput:
        """Choose a candidate per decision. ``keep``: store what ``evaluate`` needs; handles index it."""
        if not decisions:
            raise TeamTRError("act() got no decisions.")
        enc = self.encode(decisions)
        B = len(enc)
        cmax = max(len(e.candidates) for _, e in enc)
        device = self.backbone.device
        scores = torch.full((B, cmax), float("-inf"), device=device)
        mask = torch.zeros(B, cmax, dtype=torch.bool, device=device)
        values = torch.zeros(B, device=device)
        handles = [-1] * B
        for prefix, idx in self._groups([p for p, _ in enc]).items():
            decs = [enc[i][1] for i in idx]
            s, m, v, (packed, out) = self._run(prefix, decs, capture=keep)
            rows = torch.tensor(idx, device=device)
            scores[rows, : s.shape[1]] = s.float()
            mask[rows, : m.shape[1]] = m
            values[rows] = v
            if keep:
                if out.captured_prefix is not None:
                    self._prefix_hidden.setdefault(prefix, out.captured_prefix.detach())
                for j, i in enumerate(idx):
                    h = None
                    if out.captured_rows is not None:
                        h = out.captured_rows[j, : int(packed.lengths[j])].detach().clone()
                    handles[i] = len(self._store)
                    self._store.append(_Stored(prefix, enc[i][1], h))
        logp = masked_log_softmax(scores, mask)
        if greedy:
            choices = logp.argmax(-1)
        else:
            choices = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(-1)
        return ActOutput([int(c) for c in choices], logp, mask, values, handles)

    def remember(self, decisions: Sequence[DecisionLike]) -> list[int]:
        """Store decisions for ``evaluate`` without choosing (behaviour cloning). Without a cached
        trunk this only tokenises; with one it runs the frozen lower layers once."""
        if self.first_trained > 0:
            return self.act(decisions, keep=True).handles
        handles = []
        for prefix, dec in self.encode(decisions):
            handles.append(len(self._store))
            self._store.append(_Stored(prefix, dec, None))
        return handles

    def forget(self) -> None:
        """Drop what ``act(keep=True)`` stored (once an update has used it)."""
        self._store.clear()

    def evaluate(self, handles: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Recompute, with gradients, candidate scores [B, Cmax] (logits before the masked softmax)
        and values [B] for stored decisions. With a cached trunk only the top layers run."""
        hs = [int(h) for h in handles]
        items = [self._store[h] for h in hs]
        B = len(items)
        cmax = max(len(it.decision.candidates) for it in items)
        device = self.backbone.device
        parts: list[tuple[list[int], torch.Tensor, torch.Tensor]] = []
        for prefix, idx in self._groups([it.prefix for it in items]).items():
            decs = [items[i].decision for i in idx]
            cached = [items[i].rows_hidden for i in idx]
            hidden = cached if self.first_trained > 0 and all(h is not None for h in cached) else None
            s, _, v, _ = self._run(prefix, decs, capture=False, hidden=hidden)
            parts.append((idx, s, v))
        scores = torch.zeros(B, cmax, device=device)
        values = torch.zeros(B, device=device)
        for idx, s, v in parts:
            rows = torch.tensor(idx, device=device)
            scores = scores.index_put((rows,), nn.functional.pad(s.float(), (0, cmax - s.shape[1])))
            values = values.index_put((rows,), v)
        return scores, values

    def stored_mask(self, handles: Sequence[int]) -> torch.Tensor:
        cmax = max(len(self._store[h].decision.candidates) for h in handles)
        mask = torch.zeros(len(handles), cmax, dtype=torch.bool)
        for i, h in enumerate(handles):
            mask[i, : len(self._store[h].decision.candidates)] = True
        return mask

    # ----------------------------------------------------------------- weights
    @contextlib.contextmanager
    def disable_adapter(self) -> Iterator[None]:
        """The reference policy: the backbone without the LoRA adapter."""
        self.scorer.invalidate()
        try:
            with self.peft.disable_adapter():
                yield
        finally:
            self.scorer.invalidate()

    def train_only_top(self, layers: int | str) -> None:
        """Freeze the adapters below the top ``layers`` decoder layers (``all``: none) and cache the
        hidden states entering them from now on: e.g. behaviour cloning on every layer, then RL
        updates of the top layers only, which re-run just those layers (``benchmarks/update.py``)."""
        n = self.n_layers
        if layers == "all":
            layers = n - self.first_trained
        if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= n - self.first_trained:
            raise TeamTRError(
                f"model.rl_layers {layers!r} must be 'all' or an integer from 1 to {n - self.first_trained} "
                "(the layers that carry adapters)."
            )
        first = n - layers
        for name, p in self.peft.named_parameters():
            m = re.search(r"\.layers\.(\d+)\.", name)
            if "lora_" in name and m:
                p.requires_grad_(int(m.group(1)) >= first)
        self.first_trained = first
        self._store.clear()
        self._prefix_hidden.clear()
        self.weights_changed()

    @contextlib.contextmanager
    def merged(self) -> Iterator[None]:
        """Inference with the adapter folded into the base weights (no LoRA matmuls per layer:
        ~15% faster on a CPU); for evaluation, never during training. With a float16/bfloat16 trunk
        the adapter stays unmerged: a small LoRA delta rounds away in 8 mantissa bits, and unmerging
        would not give the base weights back."""
        if self.backbone.dtype != torch.float32:
            yield
            return
        self.peft.merge_adapter()
        self.weights_changed()
        try:
            yield
        finally:
            self.peft.unmerge_adapter()
            self.weights_changed()

    def weights_changed(self) -> None:
        """Call after every optimiser step or load: memoised prefix keys/values are stale."""
        self.scorer.invalidate()

    def policy_param_groups(self, lr: float = 1.0) -> list[dict[str, Any]]:
        """LoRA parameters grouped per decoder layer, with ``lr_scale`` = decay^(layers above)."""
        n = self.scorer.num_layers
        groups: dict[int, list[nn.Parameter]] = {}
        for name, p in self.peft.named_parameters():
            if p.requires_grad:
                m = re.search(r"\.layers\.(\d+)\.", name)
                groups.setdefault(int(m.group(1)) if m else n - 1, []).append(p)
        return [
            {"params": ps, "lr_scale": self.layer_lr_decay ** (n - 1 - i), "layer": i}
            for i, ps in sorted(groups.items())
        ]

    def value_parameters(self) -> list[nn.Parameter]:
        return list(self.value_head.parameters())

    def settings(self) -> dict[str, Any]:
        return {
            "backbone": self.backbone.name,
            "train_layers": self.train_layers,
            "lora": {**asdict(self.lora), "target_modules": list(self.lora.target_modules)},
            "normalization": self.normalization,
            "temperature": self.temperature,
            "layer_lr_decay": self.layer_lr_decay,
            "value_grad_to_trunk": self.value_grad_to_trunk,
        }

    def save(self, directory: str | Path) -> None:
        """Adapter in the PEFT format, value head and settings: safetensors and JSON, no pickle."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.peft.save_pretrained(str(d / "adapter"), safe_serialization=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.value_head.state_dict().items()},
                  str(d / "value_head.safetensors"))
        (d / "coordinator.json").write_text(json.dumps(self.settings(), indent=2))

    def load(self, directory: str | Path) -> None:
        """Load an adapter and value head written by ``save`` into this coordinator."""
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        d = Path(directory)
        adapter = d / "adapter" / "adapter_model.safetensors"
        if not adapter.is_file():
            raise TeamTRError(f"{d} holds no coordinator checkpoint (missing {adapter}).")
        state = load_file(str(adapter), device=str(self.backbone.device))
        result = set_peft_model_state_dict(self.peft, state)
        if getattr(result, "unexpected_keys", None):
            raise TeamTRError(f"Adapter in {d} does not fit this model/train_layers: {result.unexpected_keys[:3]}")
        self.value_head.load_state_dict(load_file(str(d / "value_head.safetensors"), device=str(self.backbone.device)))
        self.weights_changed()
