"""Branching a run: ``teamtr branch RUN --at N`` makes a new run directory that stands where ``RUN`` stood
after iteration ``N``, so that a collapse can be rescued from an earlier checkpoint, or a run continued two
ways, without touching the original.

The branch holds that checkpoint (its weights, optimiser, schedules, curriculum stage and RNG, copied
byte for byte), the config with the new ``run_dir``, the metrics and transcripts up to ``N``, the
cloned adapter (``bc/``) and every other file of the run but those that describe its later iterations
(newer checkpoints, the end-of-run table, the report, TensorBoard events, the W&B run id). Its
``resumes.jsonl`` keeps the original's resumes up to ``N`` and adds a line naming the run it branched
from. ``teamtr train --resume BRANCH [--set algo.lr=...]`` then continues it: left unchanged, it
replays the original's next iterations exactly (resume is exact).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from teamtr.atomic import atomic_write_text
from teamtr.config import dump_config, load_config
from teamtr.core import TeamTRError
from teamtr.telemetry.log import (CONFIG_FILE, EVAL_TRANSCRIPTS_FILE, FINAL_EVAL_FILE, FINAL_PARTIAL_FILE, METRICS_FILE,
                                  RESUMES_FILE, TENSORBOARD_DIR, WANDB_ID_FILE, read_resumes, require_run_dir,
                                  truncate_metrics)
from teamtr.train.checkpoint import PREFIX, checkpoint_iteration, list_checkpoints, validate_checkpoint
from teamtr.train.resume import KEEP_KINDS, truncate_transcripts

#: What a branch does not copy: they describe the original's later iterations or its own process.
LEFT_BEHIND = ("checkpoints", "report", TENSORBOARD_DIR, FINAL_EVAL_FILE, FINAL_PARTIAL_FILE, EVAL_TRANSCRIPTS_FILE,
               WANDB_ID_FILE, RESUMES_FILE, ".lock")


def branch_run(run: Path, at: int, to: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Make ``to`` (default ``RUN-atN``) a run that stands at ``run``'s checkpoint of iteration ``at``;
    return its path. ``TeamTRError`` when there is no such complete checkpoint or ``to`` exists."""
    run = require_run_dir(run)
    if not (run / CONFIG_FILE).is_file():
        raise TeamTRError(f"teamtr branch {run}: not a run directory (no {CONFIG_FILE}); give the directory "
                          "`teamtr train` wrote.")
    to = Path(to) if to is not None else run.with_name(f"{run.name}-at{at}")
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
    tmp = to.with_name(f".tmp-{to.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(run, tmp, ignore=lambda folder, names: LEFT_BEHIND if Path(folder) == run else ())
        shutil.copytree(source, tmp / "checkpoints" / f"{PREFIX}{at:06d}")
        config = load_config(run / CONFIG_FILE, [f"run_dir={to}"])
        atomic_write_text(tmp / CONFIG_FILE, dump_config(config))
        if (tmp / METRICS_FILE).exists():
            truncate_metrics(tmp, at, keep_kinds=KEEP_KINDS)  # as a resume from it would
        truncate_transcripts(tmp, at)
        rows = [r for r in read_resumes(run) if int(r.get("iteration", 0)) <= at]
        rows.append({"iteration": at, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": {},
                     "branched_from": os.path.abspath(run)})  # absolute: the branch may live elsewhere
        atomic_write_text(tmp / RESUMES_FILE, "".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(to)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"branch: {to} stands at iteration {at} of {run} (its checkpoint {source.name}); continue it with\n"
        f"  teamtr train --resume {to} [--set algo.lr=...]")
    return to
