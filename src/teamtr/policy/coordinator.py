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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Iterator, Protocol, Sequence

import torch
from torch import nn

from teamtr.atomic import read_json, read_safetensors
from teamtr.core import TeamTRError
from teamtr.policy.backbone import Backbone, backbone_layers, base_model_path, load_backbone
from teamtr.policy.levels import ADAPTERS, adapter_of, add_level, levels, load_levels, save_levels
from teamtr.policy.prompts import ChatFormat, DecisionLike, TokenCache, candidate_texts, user_text, word_count
from teamtr.policy.roles import OWN, RoleAdapters
from teamtr.policy.scoring import CandidateScorer, EncodedDecision, pack_prefixed
from teamtr.policy.settings import NORMALIZATIONS, LoraSettings
from teamtr.rl.losses import masked_log_softmax


@dataclass
class ActOutput:
    """Per decision: chosen index, full candidate log-prob vector, value, and a handle for training."""

    choices: list[int]
    logp: torch.Tensor  # [B, Cmax] log pi(c|s), -inf where masked
    mask: torch.Tensor  # [B, Cmax] bool
    values: torch.Tensor  # [B]
    handles: list[int] = field(default_factory=list)


class CoordinatorLike(Protocol):
    """What training and evaluation use of a coordinator (``Coordinator`` is the one implementation)."""

    roles: RoleAdapters  # the local LLM role agents' adapters on the same base model (policy/roles.py)

    def act(self, decisions: Sequence[DecisionLike], greedy: bool = False,
            generator: torch.Generator | None = None, keep: bool = False) -> ActOutput: ...
    def remember(self, decisions: Sequence[DecisionLike]) -> list[int]: ...
    def evaluate(self, handles: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...
    def stored_mask(self, handles: Sequence[int]) -> torch.Tensor: ...
    def after_update(self) -> None: ...
    def weights_changed(self) -> None: ...
    def forget(self) -> None: ...
    def disable_adapter(self) -> ContextManager[None]: ...
    def merged(self) -> ContextManager[None]: ...
    def adapter_state(self) -> dict[str, torch.Tensor]: ...
    def use_adapter(self, state: dict[str, torch.Tensor]) -> ContextManager[None]: ...
    def read_adapter(self, directory: str | Path) -> dict[str, torch.Tensor]: ...
    def train_only_top(self, layers: int | str) -> None: ...
    def policy_param_groups(self, lr: float = 1.0) -> list[dict[str, Any]]: ...
    def value_parameters(self) -> list[nn.Parameter]: ...
    def save(self, directory: str | Path) -> None: ...
    def load(self, directory: str | Path) -> None: ...


@dataclass
class _Stored:
    prefix: tuple[int, ...]
    decision: EncodedDecision
    rows_hidden: torch.Tensor | None  # [len, H] entering the first trained layer (cached trunk)


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
        top = adapter_layers(n_layers, backbone.name, train_layers)
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
        self.roles = RoleAdapters(self.peft, self.weights_changed)  # none until added (policy/roles.py)
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

    def _run(self, prefixes: Sequence[tuple[int, ...]], decs: list[EncodedDecision], capture: bool,
             hidden: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """One packed pass over decisions that may continue different static prefixes."""
        packed = pack_prefixed(prefixes, decs, self.scorer.max_positions)
        kwargs: dict[str, Any] = {}
        if hidden is not None:
            B, L = packed.input_ids.shape
            rows = torch.zeros(B, L, hidden[0].shape[-1], dtype=hidden[0].dtype, device=self.backbone.device)
            for b, h in enumerate(hidden):
                rows[b, : h.shape[0]] = h
            cached = [self._prefix_hidden[k] for k in packed.prefix_keys]  # [1, P_g, H] each
            width = int(packed.prefix.shape[1])
            pre = torch.cat([nn.functional.pad(h, (0, 0, 0, width - h.shape[1])) for h in cached])
            kwargs = dict(start_layer=self.first_trained, rows_hidden=rows, prefix_hidden=pre)
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
        s, mask, values, (packed, out) = self._run([p for p, _ in enc], [e for _, e in enc], capture=keep)
        scores = s.float().masked_fill(~mask, float("-inf"))
        handles = [-1] * B
        if keep:
            if out.captured_prefix is not None:
                for g, (key, n) in enumerate(zip(packed.prefix_keys, packed.prefix_lengths.tolist())):
                    self._prefix_hidden.setdefault(key, out.captured_prefix[g:g + 1, :n].detach().clone())
            for i, (prefix, dec) in enumerate(enc):
                h = None
                if out.captured_rows is not None:
                    h = out.captured_rows[i, : int(packed.lengths[i])].detach().clone()
                handles[i] = len(self._store)
                self._store.append(_Stored(prefix, dec, h))
        logp = masked_log_softmax(scores, mask, fill=float("-inf"))
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
        """Drop what ``act(keep=True)`` stored (once an update has used it), and the cached trunk
        activations of their prefixes: with fresh names every episode has its own prefix, so keeping
        them would grow without bound."""
        self._store.clear()
        self._prefix_hidden.clear()

    def evaluate(self, handles: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Recompute, with gradients, candidate scores [B, Cmax] (logits before the masked softmax)
        and values [B] for stored decisions. With a cached trunk only the top layers run."""
        items = [self._store[int(h)] for h in handles]
        cached = [it.rows_hidden for it in items]
        hidden = cached if self.first_trained > 0 and all(h is not None for h in cached) else None
        s, mask, values, _ = self._run([it.prefix for it in items], [it.decision for it in items],
                                       capture=False, hidden=hidden)
        return s.float().masked_fill(~mask, 0.0), values

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
        first = n - rl_layer_count(layers, n - self.first_trained)
        for name, p in self.peft.named_parameters():
            m = re.search(r"\.layers\.(\d+)\.", name)
            if "lora_" in name and f".{OWN}." in name and m:  # the coordinator's adapter, not the roles'
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
        active = set(self.peft.active_adapters)  # a hierarchical coordinator: the active level's only
        for name, p in self.peft.named_parameters():
            if p.requires_grad and adapter_of(name) in (active | {None}):
                m = re.search(r"\.layers\.(\d+)\.", name)
                groups.setdefault(int(m.group(1)) if m else n - 1, []).append(p)
        return [
            {"params": ps, "lr_scale": self.layer_lr_decay ** (n - 1 - i), "layer": i}
            for i, ps in sorted(groups.items())
        ]

    def value_parameters(self) -> list[nn.Parameter]:
        return list(self.value_head.parameters())

    def after_update(self) -> None:
        """Call once after every optimiser step: stale prefix memos go, and so do the stored
        decisions the step used (the one place that rule lives)."""
        self.weights_changed()
        self.forget()

    # ----------------------------------------------------------------- adapter snapshots
    def adapter_state(self) -> dict[str, torch.Tensor]:
        """A copy of the trainable adapter weights, keyed by parameter name."""
        return {k: p.detach().clone() for k, p in self.peft.named_parameters() if p.requires_grad}

    @contextlib.contextmanager
    def use_adapter(self, state: dict[str, torch.Tensor]) -> Iterator[None]:
        """Temporarily put another adapter's weights (e.g. the BC snapshot) into the coordinator."""
        params = dict(self.peft.named_parameters())
        saved = {k: params[k].detach().clone() for k in state}
        with torch.no_grad():
            for k, v in state.items():
                params[k].copy_(v)
        self.weights_changed()
        try:
            yield
        finally:
            with torch.no_grad():
                for k, v in saved.items():
                    params[k].copy_(v)
            self.weights_changed()

    def read_adapter(self, directory: str | Path) -> dict[str, torch.Tensor]:
        """The trainable adapter weights saved by ``save`` in ``directory``, checked like ``load``,
        keyed as ``adapter_state`` keys them."""
        d = Path(directory)
        self.check_compatible(read_json(d / "coordinator.json", "coordinator settings"), d)
        loaded = {k.replace(".default", ""): v for k, v in self._adapter_file(d).items()}
        names = [k for k, p in self.peft.named_parameters() if p.requires_grad]
        return {k: loaded[k.replace(".default", "")] for k in names if k.replace(".default", "") in loaded}

    # ----------------------------------------------------------------- checkpoints
    def model_info(self) -> dict[str, Any]:
        """The backbone an adapter belongs to: name (or path), decoder layers, hidden and vocab size."""
        cfg = self.backbone.model.config
        return {"name": self.backbone.name, "layers": self.n_layers, "hidden": int(cfg.hidden_size),
                "vocab": int(cfg.vocab_size)}

    def adapter_keys(self) -> list[str]:
        from peft.utils import get_peft_model_state_dict

        return sorted(get_peft_model_state_dict(self.peft))

    def settings(self) -> dict[str, Any]:
        return {
            "backbone": self.backbone.name,
            "model": self.model_info(),
            "train_layers": self.train_layers,
            "lora": self.lora.as_dict(),
            "adapter_keys": self.adapter_keys(),
            "normalization": self.normalization,
            "temperature": self.temperature,
            "layer_lr_decay": self.layer_lr_decay,
            "value_grad_to_trunk": self.value_grad_to_trunk,
        }

    def check_compatible(self, saved: dict[str, Any], where: Path) -> None:
        """Refuse a checkpoint written for another backbone, LoRA shape or set of adapter keys."""
        mine, theirs = self.model_info(), saved.get("model")
        if not isinstance(theirs, dict):
            raise TeamTRError(f"{where / 'coordinator.json'} records no backbone (written by an older TeamTR?); "
                              "it cannot be checked against this model, so it is not loaded.")
        if any(theirs.get(k) != mine[k] for k in ("layers", "hidden", "vocab")) or theirs.get("name") != mine["name"]:
            raise TeamTRError(f"checkpoint {where} was trained on backbone {_describe(theirs)}; this config loads "
                              f"{_describe(mine)}: pass --set model.backbone={theirs.get('name')}")
        wanted = {**self.lora.as_dict(), "train_layers": self.train_layers}
        got = {**dict(saved.get("lora") or {}), "train_layers": saved.get("train_layers")}
        differ = [k for k in wanted if got.get(k) != wanted[k]]
        if differ:
            fix = " ".join(f"--set model.{'' if k == 'train_layers' else 'lora.'}{k}={got.get(k)}" for k in differ)
            raise TeamTRError(f"checkpoint {where} has LoRA {', '.join(f'{k}={got.get(k)}' for k in differ)}; "
                              f"this config has {', '.join(f'{k}={wanted[k]}' for k in differ)}: pass {fix}")

    def _adapter_file(self, d: Path) -> dict[str, torch.Tensor]:
        path = d / "adapter" / "adapter_model.safetensors"
        state = read_safetensors(path, device=str(self.backbone.device), what="LoRA adapter")
        mine = set(self.adapter_keys())
        missing, extra = sorted(mine - set(state)), sorted(set(state) - mine)
        if missing or extra:
            raise TeamTRError(f"{path}: adapter keys do not fit this model (missing {missing[:2]}, "
                              f"unexpected {extra[:2]}); load it with the config it was trained with.")
        _require_finite(state, path)
        return state

    def save(self, directory: str | Path) -> None:
        """Adapter in the PEFT format, value head and settings: safetensors and JSON, no pickle."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        # The coordinator's own adapter and a hierarchical run's level adapters (adapter/strategic/);
        # the role agents' adapters are written apart, under roles/.
        own = [OWN, *(ADAPTERS[name] for name in levels(self))]
        self.peft.save_pretrained(str(d / "adapter"), safe_serialization=True, selected_adapters=own)
        if self.roles.names:
            self.roles.save(d / "roles", base_model_path(self.backbone.name))
        save_file({k: v.detach().cpu().contiguous() for k, v in self.value_head.state_dict().items()},
                  str(d / "value_head.safetensors"))
        (d / "coordinator.json").write_text(json.dumps(self.settings(), indent=2))
        self._standard_adapter(d / "adapter")
        save_levels(self, d)

    def _standard_adapter(self, adapter: Path) -> None:
        """Make ``adapter`` loadable by ``AutoPeftModelForCausalLM``: the real base model in its
        ``adapter_config.json`` (peft writes the in-memory model's name, empty or the GGUF folder),
        and a model card instead of peft's empty template."""
        from teamtr.policy.card import model_card

        base = base_model_path(self.backbone.name)
        config = read_json(adapter / "adapter_config.json", "adapter config")
        config["base_model_name_or_path"] = base
        (adapter / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        (adapter / "README.md").write_text(model_card(self.settings(), base))

    def load(self, directory: str | Path) -> None:
        """Load an adapter and value head written by ``save``, after checking they were written for
        this backbone and LoRA shape and hold only finite numbers (``TeamTRError`` otherwise)."""
        from peft.utils import set_peft_model_state_dict

        d = Path(directory)
        if not (d / "adapter" / "adapter_model.safetensors").is_file():
            raise TeamTRError(f"{d} holds no coordinator checkpoint (missing {d / 'adapter' / 'adapter_model.safetensors'}).")
        self.check_compatible(read_json(d / "coordinator.json", "coordinator settings"), d)
        state = self._adapter_file(d)
        head_path = d / "value_head.safetensors"
        head = read_safetensors(head_path, device=str(self.backbone.device), what="value head")
        _require_finite(head, head_path)
        if set(head) != set(self.value_head.state_dict()):
            raise TeamTRError(f"{head_path}: holds {sorted(head)}, not a value head ({sorted(self.value_head.state_dict())}).")
        set_peft_model_state_dict(self.peft, state)
        self.value_head.load_state_dict(head)
        if (d / "roles").is_dir():
            self.roles.load(d / "roles")
        load_levels(self, d)
        self.weights_changed()


def _describe(model: dict[str, Any]) -> str:
    return f"{model.get('name')} ({model.get('layers')} layers, hidden {model.get('hidden')}, vocab {model.get('vocab')})"


def _require_finite(state: dict[str, torch.Tensor], path: Path) -> None:
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise TeamTRError(f"{path}: {len(bad)} weight tensor(s) hold NaN or inf (e.g. {bad[0]}); "
                          "the run diverged before this checkpoint: use an earlier one.")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def adapter_layers(n_layers: int, backbone: str, train_layers: int | str) -> int:
    """How many top decoder layers carry LoRA for ``model.train_layers`` on a backbone of ``n_layers``."""
    if train_layers == "all":
        return n_layers
    if _whole(train_layers) and 1 <= int(train_layers) <= n_layers:
        return int(train_layers)
    raise TeamTRError(f"model.train_layers {train_layers!r} must be 'all' or an integer from 1 to {n_layers} "
                      f"(the number of decoder layers of {backbone}).")


def rl_layer_count(rl_layers: int | str, carried: int) -> int:
    """How many top layers RL updates for ``model.rl_layers``, of the ``carried`` layers with adapters."""
    if rl_layers == "all":
        return carried
    if _whole(rl_layers) and 1 <= int(rl_layers) <= carried:
        return int(rl_layers)
    raise TeamTRError(f"model.rl_layers {rl_layers!r} must be 'all' or an integer from 1 to {carried} "
                      "(the layers that carry adapters: model.train_layers).")


def check_layers(model: Any) -> None:
    """Check ``model.train_layers`` and ``model.rl_layers`` against the backbone's layer count, read
    from its config without loading weights (``backbone_layers``): run before any model load."""
    top = adapter_layers(backbone_layers(model.backbone), model.backbone, model.train_layers)
    rl_layer_count(model.rl_layers, top)


def build_coordinator(config: Any) -> Coordinator:
    """The coordinator a ``teamtr.config.Config`` describes (``model`` and ``policy`` sections)."""
    m = config.model
    lora = m.lora if isinstance(m.lora, LoraSettings) else LoraSettings(**m.lora)
    backbone = load_backbone(m.backbone, device=m.device, dtype=m.dtype)
    coordinator = Coordinator(backbone, train_layers=m.train_layers, lora=lora,
                              normalization=config.policy.normalization, temperature=config.policy.temperature,
                              layer_lr_decay=m.layer_lr_decay, value_grad_to_trunk=m.value_grad_to_trunk)
    hierarchy = getattr(getattr(config, "team", None), "hierarchy", None)
    if hierarchy is not None and hierarchy.enabled:
        add_level(coordinator, "strategic")  # the tactical level is the default adapter (policy/levels.py)
    return coordinator
