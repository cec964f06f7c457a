"""Coordinator levels: one LoRA adapter and one value head per level on the shared backbone.

A hierarchical coordinator (``team.hierarchy``) has two levels: the *strategic* one chooses the team's
phase goal, the *tactical* one directs the agents under that goal. Both are the same ``Coordinator``
(one backbone, one scorer) with a different PEFT adapter active:

- ``tactical`` is PEFT's ``default`` adapter: the flat coordinator's own, so behaviour cloning, the
  KL reference, ``teamtr export`` and ``serve`` keep finding "the" adapter where they always did, and
  nothing changes when the hierarchy is off;
- ``strategic`` is a second adapter of the same LoRA shape (``add_level``), saved by PEFT next to the
  first (``adapter/strategic/``), with its own value head (``value_head_strategic.safetensors``).

``use_level(coordinator, name)`` makes a level active for everything inside it: acting, ``evaluate``,
``policy_param_groups``; only the active adapter's weights require gradients, so each level's
optimiser steps on its own loss alone.
"""

from __future__ import annotations

import contextlib
import copy
import re
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from teamtr.atomic import read_safetensors
from teamtr.core import TeamTRError

#: The levels, top first, and the PEFT adapter each one uses.
LEVELS = ("strategic", "tactical")
ADAPTERS = {"strategic": "strategic", "tactical": "default"}
_ADAPTER_OF = re.compile(r"\.lora_(?:A|B|embedding_A|embedding_B|magnitude_vector)\.([^.]+)")


def adapter_of(parameter_name: str) -> str | None:
    """The PEFT adapter a LoRA parameter belongs to (``None`` for a base weight)."""
    m = _ADAPTER_OF.search(parameter_name)
    return m.group(1) if m else None


def levels(coordinator: Any) -> dict[str, nn.Module]:
    """Level name -> value head, for the levels beyond the tactical one (empty: a flat coordinator)."""
    return getattr(coordinator, "level_heads", {})


def add_level(coordinator: Any, name: str = "strategic") -> None:
    """Give ``coordinator`` a second adapter ``name`` (the default adapter's LoRA shape and layers,
    LoRA B zero so it starts as the base model) and a zero value head of its own."""
    if name not in ADAPTERS or name == "tactical":
        raise TeamTRError(f"coordinator level {name!r}: the levels beyond the default adapter are "
                          f"{[n for n in LEVELS if n != 'tactical']}.")
    heads = coordinator.__dict__.setdefault("level_heads", {})
    if name in heads:
        return
    coordinator.peft.add_adapter(ADAPTERS[name], copy.deepcopy(coordinator.peft.peft_config["default"]))
    coordinator.peft.set_adapter("default")
    head = nn.Linear(coordinator.value_head.in_features, 1).to(device=coordinator.backbone.device,
                                                                dtype=torch.float32)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    heads[name] = head
    _grads(coordinator, "default")
    coordinator.weights_changed()


def _grads(coordinator: Any, active: str) -> None:
    """Only the ``active`` adapter's LoRA weights require gradients (those of layers under
    ``model.rl_layers`` stay frozen: ``train_only_top`` froze them)."""
    first = getattr(coordinator, "first_trained", 0)
    for pname, p in coordinator.peft.named_parameters():
        adapter = adapter_of(pname)
        if adapter is None:
            continue
        m = re.search(r"\.layers\.(\d+)\.", pname)
        p.requires_grad_(adapter == active and (m is None or int(m.group(1)) >= first))


@contextlib.contextmanager
def use_level(coordinator: Any, name: str) -> Iterator[None]:
    """Inside: level ``name``'s adapter and value head are the coordinator's (``tactical``: no change)."""
    if name not in LEVELS:
        raise TeamTRError(f"coordinator level {name!r} is not one of {', '.join(LEVELS)}.")
    if name == "tactical":
        yield
        return
    heads = levels(coordinator)
    if name not in heads:
        raise TeamTRError(f"this coordinator has no {name} level; it is built with team.hierarchy.enabled=true.")
    tactical = coordinator.value_head
    coordinator.peft.set_adapter(ADAPTERS[name])
    _grads(coordinator, ADAPTERS[name])
    coordinator.value_head = heads[name]
    coordinator.weights_changed()  # memoised prefix keys/values belong to the other adapter
    try:
        yield
    finally:
        coordinator.value_head = tactical
        coordinator.peft.set_adapter("default")
        _grads(coordinator, "default")
        coordinator.weights_changed()


def save_levels(coordinator: Any, directory: Path) -> None:
    """The extra levels' value heads (PEFT's ``save_pretrained`` already wrote their adapters)."""
    from safetensors.torch import save_file

    for name, head in levels(coordinator).items():
        save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
                  str(Path(directory) / f"value_head_{name}.safetensors"))


def _level_state(coordinator: Any, d: Path, name: str) -> dict[str, torch.Tensor]:
    """Level ``name``'s LoRA weights as PEFT saved them in ``d`` (keys without the adapter's name),
    checked against this coordinator; a checkpoint of a flat run has none, and is refused with the fix."""
    from peft.utils import get_peft_model_state_dict

    adapter = d / "adapter" / ADAPTERS[name] / "adapter_model.safetensors"
    if not adapter.is_file() or not (d / f"value_head_{name}.safetensors").is_file():
        raise TeamTRError(f"{d} holds no {name} adapter (no {adapter.relative_to(d)}): it was trained without "
                          "team.hierarchy; load it with --set team.hierarchy.enabled=false.")
    # PEFT writes a non-default adapter's keys without the adapter name, like the default's.
    state = read_safetensors(adapter, device=str(coordinator.backbone.device), what=f"{name} LoRA adapter")
    want = {k.replace(f".{ADAPTERS[name]}.", ".") for k in get_peft_model_state_dict(coordinator.peft,
                                                                                      adapter_name=ADAPTERS[name])}
    if set(state) != want:
        raise TeamTRError(f"{adapter}: adapter keys do not fit this model; load it with the config it was trained with.")
    if any(v.is_floating_point() and not bool(torch.isfinite(v).all()) for v in state.values()):
        raise TeamTRError(f"{adapter}: weights hold NaN or inf; use an earlier checkpoint.")
    return state


def load_levels(coordinator: Any, directory: Path) -> None:
    """Load the extra levels' adapters and value heads written by ``save_levels``; a checkpoint of a
    flat run has none, and is refused with the fix."""
    from peft.utils import set_peft_model_state_dict

    d = Path(directory)
    for name, head in levels(coordinator).items():
        set_peft_model_state_dict(coordinator.peft, _level_state(coordinator, d, name), adapter_name=ADAPTERS[name])
        head.load_state_dict(read_safetensors(d / f"value_head_{name}.safetensors",
                                              device=str(coordinator.backbone.device), what=f"{name} value head"))
    coordinator.weights_changed()


def read_levels(coordinator: Any, directory: str | Path) -> dict[str, torch.Tensor]:
    """The extra levels' adapter weights saved in ``directory``, keyed as the coordinator's parameters
    are (``use_adapter`` puts them in place): with ``read_adapter``'s tactical weights, a hierarchical
    snapshot's two adapters, e.g. the end-of-run table's ``bc`` row of a hierarchical run."""
    d = Path(directory)
    out: dict[str, torch.Tensor] = {}
    for name in levels(coordinator):
        state, tag = _level_state(coordinator, d, name), f".{ADAPTERS[name]}."
        for pname, _ in coordinator.peft.named_parameters():
            if adapter_of(pname) == ADAPTERS[name]:
                out[pname] = state[pname.replace(tag, ".")]
    return out
