"""``teamtr sweep``'s parts: seeds trained N at a time as child processes, and the mean ± std table of
their end-of-run tables."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamtr.core import TeamTRError


def sweep_summary(runs: dict[int, Path]) -> dict[str, Any]:
    """Per policy and metric: mean, std (population) and the per-seed values of the runs' final tables."""
    finals = {seed: json.loads((run / "final_eval.json").read_text())["rows"] for seed, run in runs.items()}
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for policy in next(iter(finals.values()), {}):
        for metric in finals[next(iter(finals))][policy]:
            values = [finals[s][policy][metric] for s in finals if metric in finals[s].get(policy, {})]
            rows.setdefault(policy, {})[metric] = {"mean": statistics.fmean(values),
                                                   "std": statistics.pstdev(values), "values": values}
    return {"seeds": sorted(runs), "runs": {s: str(r) for s, r in runs.items()}, "rows": rows}


def train_parallel(config: str, sets: Sequence[str], todo: dict[int, Path], parallel: int) -> None:
    """Train ``todo``'s seeds (seed -> run directory) ``parallel`` at a time, each a ``teamtr train``
    child process of ``config`` with ``sets``, its share of the CPU threads (OMP_NUM_THREADS, unless
    already set) and its output in ``SWEEP/seed_N.log``. Waits for every child; raises naming each seed
    that failed and its log."""
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // parallel))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    queue, live, failed = list(todo.items()), {}, []
    try:
        while queue or live:
            while queue and len(live) < parallel:
                seed, run = queue.pop(0)
                resume = (run / "config.yaml").is_file()
                argv = [sys.executable, "-m", "teamtr.cli", "train",
                        *(["--resume", str(run)] if resume else ["--config", config])]
                for item in [*sets, f"seed={seed}", f"run_dir={run}"]:  # as the serial sweep passes them
                    argv += ["--set", item]
                log = run.parent / f"{run.name}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "ab") as sink:
                    live[seed] = (subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env), log)
                print(f"sweep: seed {seed} -> {run}" + (" (resuming)" if resume else "")
                      + f", {threads} thread(s), log {log}", flush=True)
            time.sleep(1.0)
            for seed, (proc, log) in list(live.items()):
                if proc.poll() is not None:
                    del live[seed]
                    print(f"sweep: seed {seed} " + ("finished" if proc.returncode == 0 else
                                                    f"failed (exit {proc.returncode}; see {log})"), flush=True)
                    if proc.returncode != 0:
                        failed.append((seed, log))
    except KeyboardInterrupt:
        for proc, _ in live.values():  # each child finishes its write in flight and keeps its run resumable
            proc.wait()
        raise
    if failed:
        raise TeamTRError("sweep: " + "; ".join(f"seed {s} failed, see {log}" for s, log in failed)
                          + ". Fix the cause and run the same sweep again: finished seeds are kept.")
