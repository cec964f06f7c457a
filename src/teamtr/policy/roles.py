"""Role adapters: one named LoRA adapter per role of the local LLM role agents, on the coordinator's model.

PEFT holds several named adapters on one base model (one copy of the weights in memory); the
coordinator's own adapter is PEFT's ``default`` and is the active one except inside
``RoleAdapters.active(role)``, where that role's adapter alone is applied (the coordinator's is not:
a role agent scores with base + its role adapter). Every adapter is trained by its own optimiser on
its own loss, and an inactive adapter takes no part in the forward pass, so no gradient crosses
between the coordinator's adapter and a role's. Role adapters never require a gradient outside
their tuning (``RoleAdapters.trainable``), so the coordinator's optimiser, snapshots and checkpoints
(which take what requires a gradient, or PEFT's ``default`` state) never see them.

Saved next to the coordinator (``coordinator/roles/``): ``roles.json`` (role -> adapter name, LoRA
shape) and, per role, ``<adapter>/adapter_model.safetensors`` + ``adapter_config.json`` in PEFT's
layout for a named adapter (``PeftModel.load_adapter(path, adapter_name)`` reads it too).
"""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from teamtr.atomic import read_json, read_safetensors
from teamtr.core import TeamTRError

OWN = "default"  # PEFT's name of the coordinator's adapter
FILE = "roles.json"


def adapter_name(role: str) -> str:
    """PEFT adapter name of ``role`` (a role word: ``engineer``, ``product manager``)."""
    return "role_" + re.sub(r"\W+", "_", role.strip().lower())


class RoleAdapters:
    """The role adapters on ``peft`` (the coordinator's ``PeftModel``).

    Args:
        peft: the PEFT model carrying the coordinator's ``default`` adapter.
        weights_changed: called whenever the weights in use change (memoised prefixes go stale).
    """

    def __init__(self, peft: Any, weights_changed: Callable[[], None]) -> None:
        self.peft = peft
        self.weights_changed = weights_changed
        self.names: dict[str, str] = {}  # role -> adapter name
        self.shape: dict[str, Any] = {}  # rank, alpha, target_modules (the same for every role)

    @property
    def roles(self) -> list[str]:
        return sorted(self.names)

    def add(self, roles: Sequence[str], rank: int, target_modules: Sequence[str], seed: int = 0) -> None:
        """Add an adapter for every role of ``roles`` not yet carried: LoRA of ``rank`` (alpha 2r) on
        ``target_modules`` of every decoder layer. Initialised from ``seed`` and the role's name, on a
        forked RNG: adding adapters leaves the global random stream (the coordinator's) untouched."""
        from peft import LoraConfig

        shape = {"rank": int(rank), "alpha": 2.0 * rank, "target_modules": sorted(target_modules)}
        if self.names and shape != self.shape:
            raise TeamTRError(f"role adapters of shape {self.shape} are loaded; these are {shape}.")
        self.shape = shape
        for role in roles:
            if role in self.names:
                continue
            name = adapter_name(role)
            config = LoraConfig(r=shape["rank"], lora_alpha=shape["alpha"], lora_dropout=0.0,
                                target_modules=list(shape["target_modules"]), bias="none")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed * 1_000_003 + zlib.crc32(role.encode()))
                self.peft.add_adapter(name, config)
            self.names[role] = name
            for p in self.parameters(role):
                p.requires_grad_(False)

    def parameters(self, role: str) -> list[nn.Parameter]:
        tag = f".{self.names[role]}."
        return [p for n, p in self.peft.named_parameters() if tag in n]

    def name_of(self, role: str) -> str:
        if role not in self.names:
            known = ", ".join(self.roles) or "none"
            raise TeamTRError(f"role {role!r} has no role adapter (carried: {known}); it was not among the llm "
                              "agents' roles when they were tuned: train again with it, or set "
                              "team.llm.role_adapters.enabled=false.")
        return self.names[role]

    @contextlib.contextmanager
    def active(self, role: str) -> Iterator[None]:
        """Score with the base model + ``role``'s adapter (the coordinator's switched off meanwhile)."""
        name = self.name_of(role)
        if any(getattr(m, "merged", False) for m in self.peft.modules() if hasattr(m, "merged_adapters")):
            self.peft.unmerge_adapter()  # a merged coordinator adapter would stay in the weights
        flags = [(p, p.requires_grad) for p in self.peft.parameters()]
        self.weights_changed()
        self.peft.set_adapter(name)
        try:
            yield
        finally:
            self.peft.set_adapter(OWN)
            for p, flag in flags:  # set_adapter marks the active adapter trainable: undo it
                p.requires_grad_(flag)
            self.weights_changed()

    @contextlib.contextmanager
    def trainable(self, roles: Sequence[str]) -> Iterator[list[nn.Parameter]]:
        """The parameters of ``roles``' adapters, requiring a gradient only inside the block."""
        params = [p for role in roles for p in self.parameters(role)]
        for p in params:
            p.requires_grad_(True)
        try:
            yield params
        finally:
            for p in params:
                p.requires_grad_(False)

    def state(self, role: str) -> dict[str, torch.Tensor]:
        from peft.utils import get_peft_model_state_dict

        return get_peft_model_state_dict(self.peft, adapter_name=self.names[role])

    # ----------------------------------------------------------------- files
    def save(self, directory: str | Path, base_model: str) -> None:
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for role, name in self.names.items():
            (d / name).mkdir(exist_ok=True)
            save_file({k: v.detach().cpu().contiguous() for k, v in self.state(role).items()},
                      str(d / name / "adapter_model.safetensors"))
            config = self.peft.peft_config[name].to_dict()
            config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}
            config["base_model_name_or_path"] = base_model
            (d / name / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
        (d / FILE).write_text(json.dumps({"roles": self.names, **self.shape}, indent=2))

    def load(self, directory: str | Path) -> None:
        """Carry and fill the role adapters saved in ``directory`` (checked: keys, finite numbers)."""
        from peft.utils import set_peft_model_state_dict

        d = Path(directory)
        saved = read_json(d / FILE, "role adapters")
        try:
            names, rank, modules = dict(saved["roles"]), int(saved["rank"]), list(saved["target_modules"])
        except (KeyError, TypeError, ValueError) as err:
            raise TeamTRError(f"{d / FILE} is not a role-adapter index ({err!r}); the checkpoint is damaged.") from None
        self.add(list(names), rank, modules)
        for role, name in names.items():
            path = d / name / "adapter_model.safetensors"
            state = read_safetensors(path, device=str(next(self.peft.parameters()).device), what="role adapter")
            mine = set(self.state(role))
            if set(state) != mine:
                raise TeamTRError(f"{path}: adapter keys do not fit this model ({len(state)} saved, {len(mine)} "
                                  "expected); load it with the config it was trained with.")
            bad = [k for k, v in state.items() if not bool(torch.isfinite(v).all())]
            if bad:
                raise TeamTRError(f"{path}: {bad[0]} holds NaN or inf; use an earlier checkpoint.")
            set_peft_model_state_dict(self.peft, state, adapter_name=name)
        self.weights_changed()


def role_files(directory: Path) -> list[Path]:
    """Every file of the role adapters saved in ``directory`` (for checkpoint validation)."""
    saved = read_json(directory / FILE, "role adapters")
    return [directory / name / f for name in dict(saved.get("roles", {})).values()
            for f in ("adapter_config.json", "adapter_model.safetensors")]
