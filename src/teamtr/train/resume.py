"""Resuming a run: which checkpoint, which config changes may apply, and the files to cut back.

A resumed run continues from the newest checkpoint whose every file reads; newer damaged ones are
moved aside (``checkpoints/damaged-iter_N``) with a line saying why. The config given on resume is
compared with the run's ``config.yaml``: keys in ``RESUMABLE`` apply; any other difference is refused,
since the checkpoint's weights, optimiser and seeds were made under the saved values.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import torch

from teamtr.atomic import atomic_write_text
from teamtr.config import Config, load_config
from teamtr.core import TeamTRError
from teamtr.telemetry.log import RESUMES_FILE, TRANSCRIPTS_FILE, parse_jsonl, read_resumes
from teamtr.train.checkpoint import newest_complete_checkpoint

#: Config keys (exact, or a prefix ending in ".") that may differ on resume; everything else is refused.
RESUMABLE = ("train.iterations", "train.eval_", "train.checkpoint_every", "train.keep_checkpoints",
             "train.final_", "log.", "run_dir", "algo.lr",
             "rollout.backend", "rollout.workers", "rollout.lockstep", "rollout.ray_address")


#: Metric kinds a resume never cuts back (numbered on their own axis: behaviour cloning's and role tuning's steps).
KEEP_KINDS = ("bc", "roles")


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algo": {"lr": 1}}`` -> ``{"algo.lr": 1}`` (an empty mapping stays a value)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def resumable(key: str) -> bool:
    return any(key == r or (r.endswith((".", "_")) and key.startswith(r)) for r in RESUMABLE)


def check_resume_config(run_dir: Path, config: Config) -> dict[str, tuple[Any, Any]]:
    """The settings of ``config`` that differ from the run's saved ``config.yaml`` (all resumable), as
    key -> (saved, new), sorted by key; ``TeamTRError`` listing the others when any non-resumable key differs."""
    saved_path = Path(run_dir) / "config.yaml"
    if not saved_path.is_file():
        return {}
    saved = flatten(load_config(saved_path, []).model_dump(mode="json"))
    new = flatten(config.model_dump(mode="json"))
    changed = sorted(k for k in saved.keys() | new.keys() if saved.get(k) != new.get(k))
    refused = [k for k in changed if not resumable(k)]
    if refused:
        shown = ", ".join(f"{k}: {saved.get(k)!r} -> {new.get(k)!r}" for k in refused[:6])
        raise TeamTRError(f"--resume {run_dir}: these settings differ from the run's config.yaml and cannot change "
                          f"mid-run ({shown}); start a new run (--set run_dir=runs/NEW) to change them.")
    return {k: (saved.get(k), new.get(k)) for k in changed}


def record_resume(run_dir: Path, iteration: int, changes: Mapping[str, tuple[Any, Any]],
                  say: Callable[[str], None] = print) -> None:
    """Append to ``RUN/resumes.jsonl`` the iteration a run went on from and the settings changed then
    (key -> [before, after]; ``config.yaml`` holds only the latest), and say them."""
    path = Path(run_dir) / RESUMES_FILE
    row = {"iteration": iteration, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "changed": {k: [old, new] for k, (old, new) in changes.items()}}
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in [*read_resumes(run_dir), row]))
    shown = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items() if k != "run_dir")
    say(f"resume: from iteration {iteration}" + (f"; changed: {shown}" if shown else "")
        + f" (recorded in {path})")


def resume_checkpoint(run_dir: Path, say: Callable[[str], None] = print) -> Path | None:
    """The newest complete checkpoint of ``run_dir``; newer damaged ones are moved aside and named."""
    found, skipped = newest_complete_checkpoint(run_dir)
    for path, reason in skipped:
        aside = path.with_name(f"damaged-{path.name}")
        n = 1
        while aside.exists():
            aside, n = path.with_name(f"damaged-{path.name}.{n}"), n + 1
        path.rename(aside)
        say(f"resume: skipped checkpoint {reason.rstrip('.')} (moved to {aside.name})")
    if found is not None and skipped:
        say(f"resume: continuing from {found.name}, the newest complete checkpoint")
    return found


def truncate_transcripts(run_dir: Path, iteration: int) -> None:
    """Keep the transcript lines of iterations <= ``iteration``; a torn last line (a kill mid-write)
    is dropped, a bad line elsewhere is an error naming the file and line."""
    path = Path(run_dir) / TRANSCRIPTS_FILE
    if path.exists():
        keep = [row for _, row in parse_jsonl(path) if row.get("iteration", 0) <= iteration]
        atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in keep))


def load_algo_state(algo: Any, state: dict[str, Any]) -> None:
    """Restore the algorithm's state, keeping the optimisers' hyper-parameters (base LR...) of the
    config it was just built from: a changed ``algo.lr`` on resume then really sets the LR."""
    optimizers = [v for v in vars(algo).values() if isinstance(v, torch.optim.Optimizer)]
    fresh = [[{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] for opt in optimizers]
    algo.load_state_dict(state)
    for opt, groups in zip(optimizers, fresh):
        for group, hyper in zip(opt.param_groups, groups):
            group.update(hyper)
