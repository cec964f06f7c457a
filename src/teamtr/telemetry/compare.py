"""`teamtr report --compare RUN...`: several runs' curves on one plot, a band per group, and a table.

Runs are grouped by label: a sweep member ``runs/sweep-X/seed_N`` belongs to ``sweep-X``, any other run
is its own group (``--label`` names groups explicitly). Each figure draws, per group, the mean over its
runs at every iteration all of them reached, with a band of one standard deviation (population) around
it. The table gives, per group, mean ± std over runs of:

- ``final``: the success of the end-of-run table (``final_eval.json``, trained row) or, before it is
  written, of the last held-out evaluation;
- ``final_return`` / ``final_invalid_rate``: the end-of-run table's trained return and share of invalid
  directives (greedy; null without the table): where every run still succeeds, how well it plays;
- ``best``: the best held-out evaluation (or training) success seen after an update (the evaluation
  before the first update, iteration 0, is the warm start's and counts for neither ``final`` nor ``best``);
- ``worst_drop``: the largest fall of the training success below its best so far;
- ``collapsed``: 1 when the training success fell below half its best and never came back above it
  (the trust-region claim's collapse count sums this over runs);
- ``kl_per_update``: mean KL(old || new) of the updates;
- ``last_return`` / ``last_entropy``: the last iteration's mean training return and policy entropy (an
  entropy that fell while return did not rise is a policy collapsing onto a few choices);
- ``decisions_to_X`` / ``seconds_to_X``: samples (behaviour-cloning demonstrations plus rollout
  decisions) and wall time (cloning plus iterations) until the training success first reached ``X``
  (null: never); ``greedy_decisions_to_X`` / ``greedy_seconds_to_X``: the same until a held-out greedy
  evaluation (``train.eval_every``; the one at iteration 0 is the warm-up alone) first reached ``X``:
  the warm-up claim's measure (absent for a run that was never evaluated).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamtr.atomic import atomic_write_text, read_json, write_json
from teamtr.core import TeamTRError
from teamtr.telemetry.log import (FINAL_EVAL_FILE, METRICS_FILE, config_value, headline_row, metric_series, read_config,
                                  read_metrics, require_run_dir)

SUCCESS = "episode/success"
SEED_RUN = re.compile(r"seed_\d+")  # a sweep's run directory (teamtr sweep)
CURVES: tuple[tuple[str, str, str], ...] = (  # (file, metric, kind)
    ("compare_success.png", "episode/success", "train"),
    ("compare_eval_success.png", "eval/success", "eval"),
    ("compare_return.png", "episode/return", "train"),
    ("compare_kl.png", "policy/kl_old_new", "train"),
    ("compare_entropy.png", "policy/entropy", "train"),
)


def group_label(run: Path) -> str:
    """``sweep-X`` for ``.../sweep-X/seed_N``, else the run directory's name (``seed_1-at16``, a branch)."""
    return run.parent.name if SEED_RUN.fullmatch(run.name) else run.name


def worst_drop(values: Sequence[float]) -> float:
    """Largest fall below the best value seen so far (0 for a curve that never falls)."""
    best, drop = -math.inf, 0.0
    for v in values:
        best = max(best, v)
        drop = max(drop, best - v)
    return drop


def collapsed(values: Sequence[float]) -> bool:
    """True when the curve fell below half its best after reaching it and never came back above."""
    if not values or max(values) <= 0:
        return False
    peak = values.index(max(values))
    half = max(values) / 2
    after = values[peak + 1:]
    return bool(after) and after[-1] < half and any(v < half for v in after)


def _first_reach(records: list[dict[str, Any]], config: dict[str, Any] | None, threshold: float,
                 greedy: bool = False) -> tuple[float | None, float | None]:
    """(samples, seconds) until the success first reached ``threshold``: the sampled training episodes'
    (``episode/success``), or with ``greedy`` the held-out evaluations' (``eval/success``; an evaluation
    at iteration 0 is the warm-up alone). Samples: behaviour-cloning demonstrations plus the rollout
    decisions of the iterations so far; seconds: cloning plus those iterations (evaluations not counted)."""
    bc = [r for r in records if r.get("kind") == "bc"]
    samples = float(config_value(config, "bc.demos") or 0) if bc else 0.0
    seconds = float(max((r.get("perf/wall_time", 0.0) for r in bc), default=0.0))
    train = sorted((r for r in records if r.get("kind") == "train"), key=lambda r: r["iteration"])
    evals = {r["iteration"]: r.get("eval/success") for r in records if r.get("kind") == "eval"}
    if greedy and isinstance(evals.get(0), (int, float)) and evals[0] >= threshold:
        return samples, seconds
    for record in train:
        samples += float(record.get("perf/decisions") or 0)
        seconds += float(record.get("perf/iteration_s") or 0.0)
        value = evals.get(record["iteration"]) if greedy else record.get(SUCCESS)
        if isinstance(value, (int, float)) and value >= threshold:
            return samples, seconds
    return None, None


def _final_row(run: Path) -> dict[str, Any]:
    """The end-of-run table's trained row (greedy, held-out seeds; ``log.headline_row``), or {} before
    it is written."""
    final = run / FINAL_EVAL_FILE
    return headline_row(read_json(final, "final table")["rows"]) if final.is_file() else {}


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def run_summary(run: Path, threshold: float = 0.9) -> dict[str, Any]:
    """The table's numbers for one run (see the module docstring)."""
    records = read_metrics(run)
    _, success = metric_series(records, SUCCESS)
    eval_iterations, all_evals = metric_series(records, "eval/success", kind="eval")
    evals = [v for i, v in zip(eval_iterations, all_evals) if i > 0]  # iteration 0: the warm start, not RL's
    _, kl = metric_series(records, "policy/kl_old_new")
    _, returns = metric_series(records, "episode/return")
    _, entropy = metric_series(records, "policy/entropy")
    samples, seconds = _first_reach(records, read_config(run), threshold)
    greedy_samples, greedy_seconds = _first_reach(records, read_config(run), threshold, greedy=True)
    key = f"{threshold:g}"
    final = _final_row(run)
    return {
        "run": str(run), "iterations": len(success),
        "final": _number(final["success"]) if final else (evals[-1] if evals else None),
        "final_return": _number(final.get("return")), "final_invalid_rate": _number(final.get("invalid_rate")),
        "best": max(evals or success) if (evals or success) else None,
        "worst_drop": worst_drop(success) if success else None,
        "collapsed": float(collapsed(success)) if success else None,
        "kl_per_update": statistics.fmean(kl) if kl else None,
        "last_return": returns[-1] if returns else None, "last_entropy": entropy[-1] if entropy else None,
        f"decisions_to_{key}": samples, f"seconds_to_{key}": seconds,
        **({f"greedy_decisions_to_{key}": greedy_samples, f"greedy_seconds_to_{key}": greedy_seconds}
           if all_evals else {}),  # a run never evaluated (train.eval_every 0) has no greedy reach, not "never"
    }


def _mean_std(values: list[Any]) -> dict[str, Any]:
    numbers = [float(v) for v in values if v is not None]
    if not numbers:
        return {"mean": None, "std": None, "n": 0, "values": values}
    return {"mean": statistics.fmean(numbers), "std": statistics.pstdev(numbers), "n": len(numbers),
            "values": values}


#: The settings a comparison's table shows per group (what the runs were asked to do).
SETTINGS = ("env", "algo.name", "algo.lr", "algo.trpo_delta", "algo.clip_eps", "algo.target_kl", "algo.epochs", "model.init",
            "train.iterations", "rollout.episodes", "policy.noise", "algo.replay_coef")


def _algo_default(key: str) -> Any:
    """The default of an ``algo.*`` knob a run's config.yaml leaves out (it records the knobs set), or None."""
    if not key.startswith("algo."):
        return None
    from teamtr.rl.settings import AlgoConfig

    return getattr(AlgoConfig(), key[len("algo."):], None)


def group_settings(runs: Sequence[Path]) -> dict[str, Any]:
    """The ``SETTINGS`` of a group's runs (from their resolved configs; a setting that differs between
    runs of one group lists every value) and their seeds."""
    configs = [read_config(run) or {} for run in runs]
    out: dict[str, Any] = {"seeds": [config_value(c, "seed") for c in configs]}
    for key in SETTINGS:
        values = [_algo_default(key) if config_value(c, key) is None else config_value(c, key) for c in configs]
        out[key] = values[0] if all(v == values[0] for v in values) else values
    return out


def summarise(groups: dict[str, list[Path]], threshold: float = 0.9) -> dict[str, Any]:
    """Per group: the runs' summaries, their settings and mean ± std of each number (``None`` values
    left out)."""
    table: dict[str, Any] = {}
    for label, runs in groups.items():
        summaries = [run_summary(run, threshold) for run in runs]
        keys = [k for k in dict.fromkeys(k for s in summaries for k in s) if k not in ("run", "iterations")]
        table[label] = {"runs": summaries, "settings": group_settings(runs),
                        **{k: _mean_std([s.get(k) for s in summaries]) for k in keys}}
    return table


def _band(runs: list[Path], metric: str, kind: str) -> tuple[list[int], list[float], list[float]] | None:
    """Iterations every run reached, the mean over runs and the std, or None when a run lacks the metric."""
    series = [dict(zip(*metric_series(read_metrics(run), metric, kind=kind))) for run in runs]
    if not all(series):
        return None
    common = sorted(set.intersection(*(set(s) for s in series)))
    if not common:
        return None
    means = [statistics.fmean(s[i] for s in series) for i in common]
    stds = [statistics.pstdev([s[i] for s in series]) for i in common]
    return common, means, stds


def _draw(groups: dict[str, list[Path]], metric: str, kind: str, out: Path) -> bool:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    drawn = False
    for label, runs in groups.items():
        band = _band(runs, metric, kind)
        if band is None:
            continue
        xs, means, stds = band
        (line,) = ax.plot(xs, means, marker="o" if len(xs) < 12 else None, label=f"{label} (n={len(runs)})")
        ax.fill_between(xs, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                        color=line.get_color(), alpha=0.2)
        drawn = True
    if not drawn:
        return False
    ax.set_xlabel("iteration")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean ± std over runs")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    return True


def mean_std(stat: dict[str, Any], digits: int = 3) -> str:
    """``mean ± std`` of a statistic over runs or seeds (``values``; ``n`` of them measured); one run: its
    value alone, not a spread of 0 it never measured."""
    n = stat.get("n", len(stat["values"]))
    return f"{stat['mean']:.{digits}f}" + ("" if n == 1 else f" ± {stat['std']:.{digits}f}")


def _cell(stat: dict[str, Any]) -> str:
    if stat["mean"] is None:
        return "-"
    return mean_std(stat) + (f" ({stat['n']})" if stat["n"] != len(stat["values"]) else "")


def table_markdown(table: dict[str, Any]) -> str:
    """The summary as a Markdown table (a cell with fewer runs than its group says how many in brackets)."""
    keys = [k for k in next(iter(table.values())) if k not in ("runs", "settings")]
    lines = ["| runs | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for label, row in table.items():
        lines.append(f"| {label} (n={len(row['runs'])}) | " + " | ".join(_cell(row[k]) for k in keys) + " |")
    return "\n".join(lines) + "\n"


def _seed_runs(folder: Path) -> list[Path]:
    """``folder``'s ``seed_N`` run directories (not ``seed_1-at16``, a branch of one: ``teamtr branch``)."""
    return sorted(p for p in folder.glob("seed_*") if p.is_dir() and SEED_RUN.fullmatch(p.name)) \
        if folder.is_dir() else []


def _members(run: Path) -> list[Path]:
    """A sweep directory (holding ``seed_N`` runs, no metrics of its own) stands for its runs."""
    members = _seed_runs(run)
    return members if members and not (run / METRICS_FILE).exists() else [run]


def _grid_cells(run: Path) -> list[Path]:
    """The cells of a ``teamtr sweep --grid`` directory (sub-directories holding ``seed_N`` runs), or []."""
    if (run / METRICS_FILE).exists() or _seed_runs(run) or not run.is_dir():
        return []
    return sorted(p for p in run.iterdir() if p.is_dir() and _seed_runs(p))


def group_runs(runs: Sequence[str | Path], labels: Sequence[str] | None = None) -> dict[str, list[Path]]:
    """Runs by group label. Each argument is a run, a sweep directory (its ``seed_N`` runs form one group)
    or a grid sweep's directory (one group per cell); ``labels`` (one per argument) override
    :func:`group_label` and may pool arguments under one label on purpose; without them two arguments
    whose groups would share a label are an error, not silently pooled."""
    if labels and len(labels) != len(runs):
        raise TeamTRError(f"--label was given {len(labels)} times for {len(runs)} runs or sweeps; give one label "
                          "per argument or none (sweep members group by their sweep directory).")
    groups: dict[str, list[Path]] = {}
    owner: dict[str, str] = {}  # label -> the argument that made it
    for i, arg in enumerate(runs):
        cells = _grid_cells(Path(arg))
        if cells and labels:
            raise TeamTRError(f"{arg} is a grid sweep (one group per cell): drop --label, or pass its cells "
                              "one by one, each with its --label.")
        for source in cells or [Path(arg)]:
            for path in _members(source):
                require_run_dir(path)
                label = labels[i] if labels else group_label(path)
                if not labels and owner.setdefault(label, str(source)) != str(source):
                    raise TeamTRError(f"{owner[label]} and {source} would both be labelled {label!r}; give "
                                      "--label once per argument (the same label twice pools them on purpose).")
                groups.setdefault(label, []).append(path)
    return groups


def write_comparison(runs: Sequence[str | Path], out: str | Path, labels: Sequence[str] | None = None,
                     threshold: float = 0.9, command: str = "") -> dict[str, Any]:
    """Figures, ``compare.json`` (with ``command``, the one that made it) and ``compare.md`` in ``out``;
    returns the table."""
    groups = group_runs(runs, labels)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = summarise(groups, threshold)
    figures = [file for file, metric, kind in CURVES if _draw(groups, metric, kind, out / file)]
    write_json(out / "compare.json", {"command": command, "threshold": threshold, "figures": figures,
                                      "groups": table})
    atomic_write_text(out / "compare.md", table_markdown(table))
    return table
