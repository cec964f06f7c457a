"""Atomic checkpoints: adapter (PEFT format), value head, optimiser, schedules, KL controller, RNG.

Layout: ``RUN/checkpoints/iter_000010/`` holding ``coordinator/`` (``Coordinator.save``),
``algo.safetensors`` + ``algo.json`` (the algorithm's state: tensors and plain values split), and
``trainer.json`` (iteration, RNG states, counters). Safetensors and JSON only, never pickle. A
checkpoint is written into a temporary folder and renamed into place, so a folder named ``iter_*``
is always complete, unless a disk fault or a hand damaged it afterwards: ``validate_checkpoint`` reads
every file, and ``train/resume.py`` falls back past damaged ones. The last ``keep`` are kept.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from teamtr.atomic import atomic_directory, read_json, read_safetensors
from teamtr.core import TeamTRError
from teamtr.policy.coordinator import CoordinatorLike
from teamtr.policy.roles import role_files
from teamtr.rl import Algorithm

PREFIX = "iter_"


def checkpoint_iteration(path: Path) -> int:
    """The iteration a checkpoint folder holds, from its name (``iter_000050`` -> 50)."""
    return int(Path(path).name.removeprefix(PREFIX))


def _split(obj: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    """Nested dicts/lists with tensors -> JSON-able tree with tensor references."""
    if isinstance(obj, torch.Tensor):
        key = path or "root"
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        return {"__dict__": [[_split(k, tensors, f"{path}.k{i}"), _split(v, tensors, f"{path}.{i}")]
                             for i, (k, v) in enumerate(obj.items())]}
    if isinstance(obj, (list, tuple)):
        return {"__list__": [_split(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)],
                "tuple": isinstance(obj, tuple)}
    if isinstance(obj, float) and not np.isfinite(obj):
        return {"__float__": repr(obj)}
    return obj


def _join(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__dict__" in obj:
            return {_join(k, tensors): _join(v, tensors) for k, v in obj["__dict__"]}
        if "__list__" in obj:
            items = [_join(v, tensors) for v in obj["__list__"]]
            return tuple(items) if obj.get("tuple") else items
        if "__float__" in obj:
            return float(obj["__float__"])
    return obj


def save_state(state: Any, directory: Path, name: str) -> None:
    tensors: dict[str, torch.Tensor] = {}
    tree = _split(state, tensors, "")
    save_file(tensors, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(tree))


def load_state(directory: Path, name: str) -> Any:
    tensors = read_safetensors(directory / f"{name}.safetensors", what=f"checkpoint {name} state")
    tree = read_json(directory / f"{name}.json", f"checkpoint {name} state")
    try:
        return _join(tree, tensors)
    except (KeyError, TypeError, ValueError) as err:
        raise TeamTRError(f"{directory / (name + '.json')}: does not match {name}.safetensors ({err!r}); "
                          "the checkpoint is damaged.") from None


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.random.get_rng_state(),
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
        "numpy": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                  for k, v in zip(("kind", "keys", "pos", "has_gauss", "cached"), np.random.get_state())},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.random.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n["kind"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached"]))


def save_checkpoint(run_dir: Path, iteration: int, coordinator: CoordinatorLike, algo: Algorithm,
                    trainer: dict[str, Any], keep: int = 2) -> Path:
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # left by a run killed while writing; never a valid checkpoint
        shutil.rmtree(stale, ignore_errors=True)
    final = root / f"{PREFIX}{iteration:06d}"
    with atomic_directory(final) as tmp:
        coordinator.save(tmp / "coordinator")
        save_state(algo.state_dict(), tmp, "algo")
        save_state({"trainer": trainer, "rng": rng_state(), "iteration": iteration}, tmp, "trainer")
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX))


def newest_complete_checkpoint(run_dir: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint whose every file reads, and the newer ones skipped with the reason."""
    skipped: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(run_dir)):
        reason = validate_checkpoint(path)
        if reason is None:
            return path, skipped
        skipped.append((path, reason))
    return None, skipped


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` (damaged newer ones are passed over)."""
    return newest_complete_checkpoint(run_dir)[0]


#: Every file a complete checkpoint holds, relative to its ``iter_N`` folder.
CHECKPOINT_FILES = ("trainer.json", "trainer.safetensors", "algo.json", "algo.safetensors",
                    "coordinator/coordinator.json", "coordinator/value_head.safetensors",
                    "coordinator/adapter/adapter_config.json", "coordinator/adapter/adapter_model.safetensors")


def validate_checkpoint(path: Path) -> str | None:
    """Read every file of checkpoint ``path``: None when all parse, else why it is not complete."""
    path = Path(path)
    if not path.is_dir() or not any(path.iterdir()):
        return f"{path.name}: empty folder"
    roles = path / "coordinator" / "roles"
    try:  # the LLM role agents' adapters, when the run tuned them (policy/roles.py)
        extra = [f.relative_to(path).as_posix() for f in role_files(roles)] if roles.is_dir() else []
    except TeamTRError as err:
        return f"{path.name}: {str(err).replace(str(path) + '/', '')}"
    levels = sorted(str(f.relative_to(path)) for f in [*path.glob("coordinator/adapter/*/adapter_model.safetensors"),
                                                       *path.glob("coordinator/value_head_*.safetensors")])
    for name in (*CHECKPOINT_FILES, *extra, *levels):  # levels: a hierarchical run's strategic adapter and value head
        f = path / name
        try:
            read_json(f) if name.endswith(".json") else read_safetensors(f)
        except TeamTRError as err:
            return f"{path.name}: {str(err).replace(str(path) + '/', '')}"
    try:
        load_state(path, "trainer")
        load_state(path, "algo")
    except TeamTRError as err:
        return f"{path.name}: {err}"
    return None


def load_checkpoint(path: Path, coordinator: CoordinatorLike, algo: Algorithm | None = None) -> dict[str, Any]:
    """Restore weights (and the algorithm's state when given); return the trainer state (iteration,
    counters) after restoring RNG states. A damaged or mismatched checkpoint raises ``TeamTRError``."""
    path = Path(path)
    if not (path / "trainer.json").is_file():
        raise TeamTRError(f"{path} is not a complete TeamTR checkpoint (no trainer.json).")
    coordinator.load(path / "coordinator")
    if algo is not None:
        algo.load_state_dict(load_state(path, "algo"))
    state = load_state(path, "trainer")
    set_rng_state(state["rng"])
    return {"iteration": int(state["iteration"]), **state["trainer"]}


def resolve_checkpoint(path: str) -> tuple[Path, Path]:
    """(checkpoint folder holding ``coordinator/`` or ``adapter/``, run directory) for a checkpoint
    folder, a run directory (its latest checkpoint) or a ``Coordinator.save`` folder; its settings file
    is read now, so a damaged checkpoint fails before any model is loaded."""
    folder, run_dir = _checkpoint_folder(path)
    if (folder / "coordinator.json").is_file():
        read_json(folder / "coordinator.json", "coordinator settings")
    return folder, run_dir


def _checkpoint_folder(path: str) -> tuple[Path, Path]:
    p = Path(path)
    if (p / "coordinator").is_dir():
        return p / "coordinator", p.parent.parent
    if (p / "checkpoints").is_dir():
        found = latest_checkpoint(p)
        if found is not None:
            return found / "coordinator", p
    if (p / "adapter").is_dir():
        return p, p.parent
    raise TeamTRError(f"--checkpoint {path}: no checkpoint there (expected RUN_DIR, RUN_DIR/checkpoints/iter_N, "
                      "or a folder with adapter/).")
