"""Branching a run: ``teamtr branch RUN --at N`` makes a new run directory that stands where ``RUN`` stood
after iteration ``N``, so that a collapse can be rescued from an earlier checkpoint, or a run continued two
ways, without touching the original.

The branch holds that checkpoint (its weights, optimiser, schedules, curriculum stage and RNG, copied
byte for byte), the config the original trained on after ``N`` (``config.yaml`` holds a run's latest
settings: each change a later resume recorded in ``resumes.jsonl`` is undone, newest first) with the new
``run_dir``, the metrics and transcripts up to ``N``, the cloned adapter (``bc/``), the TensorBoard
events (a resume purges those after ``N``, as for any resumed run) and every other file of the run but
those of its later iterations or its own process: newer checkpoints, the end-of-run table and its
episodes, the report, the W&B run and its id, the lock. Its ``resumes.jsonl`` keeps the original's
resumes up to ``N`` and adds a line naming the run it branched from. ``teamtr train --resume BRANCH
[--set algo.lr=...]`` then continues it: left unchanged, it replays the original's next iterations
exactly (resume is exact).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from teamtr.atomic import atomic_write_text
from teamtr.config import dump_config, load_config
from teamtr.core import TeamTRError
from teamtr.telemetry.log import (CONFIG_FILE, EVAL_TRANSCRIPTS_FILE, FINAL_EVAL_FILE, FINAL_PARTIAL_FILE, METRICS_FILE,
                                  RESUMES_FILE, WANDB_ID_FILE, read_resumes, require_run_dir, truncate_metrics)
from teamtr.train.checkpoint import PREFIX, checkpoint_iteration, list_checkpoints, validate_checkpoint
from teamtr.train.lock import LOCK_NAME
from teamtr.train.resume import KEEP_KINDS, flatten, truncate_transcripts

#: What a branch does not copy: they describe the original's later iterations or its own process.
LEFT_BEHIND = ("checkpoints", "report", FINAL_EVAL_FILE, FINAL_PARTIAL_FILE, EVAL_TRANSCRIPTS_FILE, "wandb",
               WANDB_ID_FILE, RESUMES_FILE, LOCK_NAME)


def branch_run(run: Path, at: int, to: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Make ``to`` (default ``RUN-atN``) a run that stands at ``run``'s checkpoint of iteration ``at``;
    return its path. ``TeamTRError`` when there is no such complete checkpoint or ``to`` exists."""
    run = Path(os.path.abspath(require_run_dir(run)))  # absolute: "." has no name to build the default from
    if not (run / CONFIG_FILE).is_file():
        raise TeamTRError(f"teamtr branch {run}: not a run directory (no {CONFIG_FILE}); give the directory "
                          "`teamtr train` wrote.")
    to = Path(os.path.abspath(to)) if to is not None else run.with_name(f"{run.name}-at{at}")
    if run.resolve() == to.resolve() or run.resolve() in to.resolve().parents:
        raise TeamTRError(f"teamtr branch: --to {to} lies inside {run}; give a directory beside it.")
    have = list_checkpoints(run)
    source = next((p for p in have if checkpoint_iteration(p) == at), None)
    if source is None:
        kept = ", ".join(str(checkpoint_iteration(p)) for p in have) or "none"
        raise TeamTRError(f"teamtr branch {run} --at {at}: no checkpoint of iteration {at} (kept: {kept}); "
                          "train.keep_checkpoints sets how many a run keeps.")
    damaged = validate_checkpoint(source)
    if damaged is not None:
        raise TeamTRError(f"teamtr branch {run} --at {at}: {source} is damaged ({damaged.rstrip('.')}).")
    if to.exists() or to.is_symlink():
        raise TeamTRError(f"teamtr branch: {to} already exists; nothing was copied: --to runs/NEW.")
    resumes = read_resumes(run)
    settings = _settings_at(run, at, resumes)
    tmp = to.with_name(f".tmp-{to.name}")  # hidden: teamtr status does not list it
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(run, tmp, ignore=lambda folder, names: LEFT_BEHIND if Path(folder) == run else ())
        ckpt = tmp / "checkpoints" / f"{PREFIX}{at:06d}"
        shutil.copytree(source, ckpt)
        if validate_checkpoint(ckpt) is not None:  # a live run's rotation took it away mid-copy
            raise OSError(f"{source} changed while it was copied")
        atomic_write_text(tmp / CONFIG_FILE, yaml.safe_dump(settings, sort_keys=False))
        atomic_write_text(tmp / CONFIG_FILE, dump_config(load_config(tmp / CONFIG_FILE, [f"run_dir={to}"])))
        if (tmp / METRICS_FILE).exists():
            truncate_metrics(tmp, at, keep_kinds=KEEP_KINDS)  # as a resume from it would
        truncate_transcripts(tmp, at)
        rows = [r for r in resumes if int(r.get("iteration", 0)) <= at]
        rows.append({"iteration": at, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": {},
                     "branched_from": str(run)})
        atomic_write_text(tmp / RESUMES_FILE, "".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(to)
    except (OSError, shutil.Error) as err:
        raise TeamTRError(f"teamtr branch {run} --at {at}: copying to {to} failed ({err}); nothing was kept, "
                          "the original is untouched: try again (a live run may have removed the checkpoint).") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"branch: {to} stands at iteration {at} of {run} (its checkpoint {source.name}); continue it with\n"
        f"  teamtr train --resume {to} [--set algo.lr=...]")
    return to


def _settings_at(run: Path, at: int, resumes: list[dict[str, Any]]) -> dict[str, Any]:
    """The settings ``run`` trained on after iteration ``at``: its ``config.yaml`` (the latest) with each
    change a resume after ``at`` made undone, newest first, so the earliest one's "before" stays. A
    "before" of None is a key that was absent (an algorithm option left at its default) unless the
    config declares it (``train.final_bc_episodes: null``)."""
    settings = load_config(run / CONFIG_FILE, []).model_dump(mode="json")
    declared = set(flatten(load_config(None, []).model_dump(mode="json")))
    for row in reversed(resumes):
        if int(row.get("iteration", 0)) <= at:
            continue
        for key, (before, _) in (row.get("changed") or {}).items():
            *path, leaf = key.split(".")
            node = settings
            for part in path:
                node = node.setdefault(part, {})
            if before is None and key not in declared:
                node.pop(leaf, None)
            else:
                node[leaf] = before
    return settings
