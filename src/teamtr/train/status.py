"""Where each run stands: ``teamtr status [DIR ...]`` finds the run directories under the paths given
(``runs/`` by default; a sweep's ``seed_N`` folders included) and says, per run, whether a trainer is
in it now, how far it got (cloning step, iteration of how many and the curriculum stage, the end-of-run
table), its latest sampled and held-out success, the final table's, the time spent and, by the median of the
recent iterations, the time left. Read-only: it reads ``config.yaml``, ``metrics.jsonl`` and ``final_eval.json``
and probes the run's lock without taking it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamtr.core import TeamTRError
from teamtr.telemetry.log import FINAL_EVAL_FILE, config_value, headline_row, metric_series, read_config, read_metrics
from teamtr.train.lock import lock_holder

RECENT = 5  # iterations whose median time estimates the time left
SKIP = {"checkpoints", "bc", "tb", "report", "compare"}  # folders inside a run that are not runs


def find_runs(paths: Sequence[str | Path], depth: int = 4) -> list[Path]:
    """Every directory holding a ``config.yaml`` at or below ``paths`` (``depth`` levels down), sorted."""
    found: set[Path] = set()

    def walk(path: Path, left: int) -> None:
        if (path / "config.yaml").is_file():
            found.add(path)
        if left > 0:
            for child in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in SKIP
                                and not p.name.startswith(".")):  # hidden: a branch being copied (.tmp-NAME)
                walk(child, left - 1)

    for given in paths:
        path = Path(given)
        if not path.is_dir():
            raise TeamTRError(f"teamtr status: {str(path)!r} is not a directory; give a run or a folder of runs.")
        walk(path, depth)
    return sorted(found)


def run_status(run: Path) -> dict[str, Any]:
    """One run's standing (see the module docstring), as plain values."""
    config = read_config(run) or {}
    records = read_metrics(run)
    total = config_value(config, "train.iterations")
    its, seconds = metric_series(records, "perf/iteration_s")
    done_it = its[-1] if its else 0
    bc_steps, _ = metric_series(records, "perf/wall_time", kind="bc")
    bc_seconds = max(metric_series(records, "perf/wall_time", kind="bc")[1], default=0.0)
    final = run / FINAL_EVAL_FILE
    holder = lock_holder(run)
    out: dict[str, Any] = {
        "run": str(run), "world": config_value(config, "env.name"),
        "state": f"running (pid {holder})" if holder else ("done" if final.is_file() else "stopped"),
        "iteration": done_it, "iterations": total,
        "train_success": _last(records, "episode/success", "train"),
        "eval_success": _last(records, "eval/success", "eval"),
        "final_success": _final_success(final),
        "seconds": bc_seconds + sum(seconds),
    }
    if not its and bc_steps:
        out["phase"] = f"cloning, step {bc_steps[-1]}"
    elif isinstance(total, int) and done_it >= total or final.is_file():
        out["phase"] = "done" if final.is_file() else "end-of-run table"
    else:
        # iterations finished of the total: "iteration 0/30" while the first one runs
        out["phase"] = f"iteration {done_it}/{total}" if isinstance(total, int) else "starting"
        stages = config_value(config, "curriculum.stages")
        trained_on = _last(records, "curriculum/stage", "train")
        if stages and trained_on is not None:  # the curriculum stage the last iteration trained on (the task: last)
            out["phase"] += f", stage {int(trained_on) + 1}/{len(stages) + 1}"
    if seconds and isinstance(total, int) and done_it < total and not final.is_file():
        # the recent iterations' pace: a curriculum's stages differ in cost (software_team_ppo's first: ~6 min an
        # iteration on a 2-core CPU, the task ~4)
        out["seconds_left"] = statistics.median(seconds[-RECENT:]) * (total - done_it)
    return out


def _last(records: list[dict[str, Any]], key: str, kind: str) -> float | None:
    _, values = metric_series(records, key, kind=kind)
    return values[-1] if values else None


def _final_success(path: Path) -> float | None:
    """The end-of-run table's trained success (``log.headline_row``), or None before it is written."""
    if not path.is_file():
        return None
    try:
        return headline_row(json.loads(path.read_text())["rows"]).get("success")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def format_status(rows: list[dict[str, Any]]) -> str:
    """A plain table, one line per run."""
    head = ("run", "world", "state", "phase", "sampled", "held-out", "final", "time", "left")
    lines = [head]
    for r in rows:
        lines.append((r["run"], str(r["world"]), r["state"], r["phase"], _num(r["train_success"]),
                      _num(r["eval_success"]), _num(r["final_success"]), _dur(r["seconds"]),
                      "~" + _dur(r["seconds_left"]) if "seconds_left" in r else "-"))
    widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _dur(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
