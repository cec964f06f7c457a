"""``teamtr sweep``'s parts: a grid of settings (``--grid KEY=V1,V2``) crossed with seeds, runs trained
N at a time as child processes, and the mean ± std table of their end-of-run tables."""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamtr.core import TeamTRError
from teamtr.telemetry.log import FINAL_EVAL_FILE
from teamtr.train.interrupt import Terminated


def sweep_summary(runs: dict[int, Path]) -> dict[str, Any]:
    """Per policy and metric: mean, std (population) and the per-seed values of the runs' final tables."""
    finals = {seed: json.loads((run / FINAL_EVAL_FILE).read_text())["rows"] for seed, run in runs.items()}
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for policy in next(iter(finals.values()), {}):
        for metric in finals[next(iter(finals))][policy]:
            values = [finals[s][policy][metric] for s in finals if metric in finals[s].get(policy, {})]
            rows.setdefault(policy, {})[metric] = {"mean": statistics.fmean(values),
                                                   "std": statistics.pstdev(values), "values": values}
    return {"seeds": sorted(runs), "runs": {s: str(r) for s, r in runs.items()}, "rows": rows}


def _split_values(text: str) -> list[str]:
    """``a,b,[c,d]`` -> ``["a", "b", "[c,d]"]``: commas inside brackets or braces belong to a value."""
    values, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return [v.strip() for v in values]


def grid_cells(grid: Sequence[str], sets: Sequence[str] = ()) -> list[tuple[str, list[str]]]:
    """``--grid KEY=V1,V2 ...`` -> one ``(label, [KEY=V, ...])`` per combination, the first key varying
    slowest; the label (a directory name) reads ``name=pg_lr=3e-4`` (each key's last part, unless two keys
    share it; characters other than letters, digits and ``.=+-_`` become ``-``). No grid: one unlabelled
    cell. Raises on a malformed item, an empty value, a value or key given twice, a key that ``--set``
    also fixes or the sweep sets itself (``seed``, ``run_dir``), and two cells whose labels would name one
    directory."""
    if not grid:
        return [("", [])]
    keys: list[str] = []
    choices: list[list[str]] = []
    fixed = {item.partition("=")[0].strip() for item in sets}
    for item in grid:
        key, eq, text = item.partition("=")
        key = key.strip()
        values = _split_values(text) if eq else []
        if not key or not eq or not all(values):
            raise TeamTRError(f"sweep --grid {item!r}: write KEY=V1,V2,... with no empty value, e.g. "
                              "--grid algo.name=pg,ppo --grid algo.lr=3e-5,3e-4")
        if key in keys:
            raise TeamTRError(f"sweep --grid: {key!r} is given twice; list all its values in one --grid {key}=...")
        if key in ("seed", "run_dir"):
            raise TeamTRError(f"sweep --grid: {key!r} is the sweep's own (--seeds, --out); vary it there")
        if key in fixed:
            raise TeamTRError(f"sweep: {key!r} is both in --grid and in --set; drop one of them")
        if len(set(values)) != len(values):
            raise TeamTRError(f"sweep --grid {item!r}: a value is listed twice")
        keys.append(key)
        choices.append(values)
    short = [k.rsplit(".", 1)[-1] for k in keys]
    names = [s if short.count(s) == 1 else k for s, k in zip(short, keys)]
    cells = []
    for combo in itertools.product(*choices):
        label = "_".join(f"{n}={v}" for n, v in zip(names, combo))
        cells.append((re.sub(r"[^\w.=+-]", "-", label), [f"{k}={v}" for k, v in zip(keys, combo)]))
    seen: dict[str, list[str]] = {}
    for label, cell in cells:  # case-folded: one directory on a case-insensitive file system
        if label.lower() in seen:
            raise TeamTRError(f"sweep --grid: {seen[label.lower()]} and {cell} would both train in {label!r}; "
                              "use values that differ in letters or digits")
        seen[label.lower()] = cell
    return cells


def train_parallel(config: str, jobs: Sequence[tuple[str, Sequence[str], Path]], parallel: int) -> None:
    """Train ``jobs`` (name, ``--set`` items, run directory) ``parallel`` at a time, each a ``teamtr
    train`` child process of ``config`` (or ``--resume`` of its run, when started), its share of the CPU
    threads (OMP_NUM_THREADS, unless already set) and its output in ``RUN.log`` beside the run. Waits for
    every child; raises naming each job that failed and its log."""
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // parallel))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    queue, live, failed = list(jobs), {}, []
    try:
        while queue or live:
            while queue and len(live) < parallel:
                name, sets, run = queue.pop(0)
                resume = (run / "config.yaml").is_file()
                argv = [sys.executable, "-m", "teamtr.cli", "train",
                        *(["--resume", str(run)] if resume else ["--config", config])]
                for item in sets:  # as the serial sweep passes them
                    argv += ["--set", item]
                log = run.parent / f"{run.name}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "ab") as sink:
                    live[name] = (subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env), log)
                print(f"sweep: {name} -> {run}" + (" (resuming)" if resume else "")
                      + f", {threads} thread(s), log {log}", flush=True)
            time.sleep(1.0)
            for name, (proc, log) in list(live.items()):
                if proc.poll() is not None:
                    del live[name]
                    print(f"sweep: {name} " + ("finished" if proc.returncode == 0 else
                                               f"failed (exit {proc.returncode}; see {log})"), flush=True)
                    if proc.returncode != 0:
                        failed.append((name, log))
    except KeyboardInterrupt as stop:
        for proc, _ in live.values():  # each child finishes its write in flight and keeps its run resumable
            if isinstance(stop, Terminated):
                proc.terminate()  # Ctrl-C reaches the children from the terminal; a `kill` of the sweep does not
            proc.wait()
        raise
    if failed:
        raise TeamTRError("sweep: " + "; ".join(f"{name} failed, see {log}" for name, log in failed)
                          + ". Fix the cause and run the same sweep again: finished runs are kept.")
