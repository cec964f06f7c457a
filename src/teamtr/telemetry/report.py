"""The run report: PNG curves and one HTML page (curves, the end-of-run table, the latest eval table,
an episode viewer, the config).

``write_report(run_dir)`` reads ``metrics.jsonl``, ``config.yaml``, ``final_eval.json`` (written by
``teamtr train`` after training: ``{"episodes": {policy: n}, "rows": {policy: {metric: value}}}``) and
the transcripts the viewer shows (``transcripts.jsonl``, ``eval_transcripts.jsonl``: their format is
in ``teamtr.telemetry.viewer``), and writes ``run_dir/report/*.png`` and ``run_dir/report/index.html``.
The page is self-contained (inline script and style, no network). It works on partial runs: a figure
whose metrics are all missing is not drawn, and a missing file leaves its section saying so.

Matplotlib is used through ``Figure`` + the Agg canvas directly, never ``pyplot``, so writing a
report changes no global backend of the caller's process and needs no display.
"""

from __future__ import annotations

import html
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from teamtr.atomic import atomic_write_text, read_json
from teamtr.core import TeamTRError
from teamtr.telemetry.doctor import rolling_mean
from teamtr.telemetry.log import (
    CONFIG_FILE, FINAL_EVAL_FILE, config_value, metric_series, read_config, read_metrics, read_resumes, require_run_dir,
)
from teamtr.telemetry.metrics import METRICS, spread_columns, with_spread
from teamtr.telemetry.viewer import DEFAULT_LIMITS, ViewerLimits, viewer_css, viewer_section

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPORT_DIR = "report"
EVAL_COLUMNS: tuple[str, ...] = (
    "eval/success", "eval/return", "eval/length", "eval/conflicts",
    "eval/idle_rate", "eval/comm_effectiveness", "eval/invalid_rate",
)


@dataclass(frozen=True)
class PlotSpec:
    """One PNG: ``keys`` drawn against ``x_label`` (one panel per key when ``panels``).

    ``eval_key`` overlays that eval metric per suite as markers; ``target`` names the config key of
    a horizontal reference line (drawn only when the run's config has a number there).
    """

    file: str
    title: str
    keys: tuple[str, ...]
    kind: str = "train"
    panels: bool = False
    eval_key: str | None = None
    target: str | None = None
    trend: bool = True  # False for schedules (lr, coefficients): smoothing a planned curve says nothing
    x_label: str = "iteration"  # what the x values of ``kind``'s lines count


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("return.png", "Team return per episode", ("episode/return",), eval_key="eval/return"),
    PlotSpec("success.png", "Success rate", ("episode/success",), eval_key="eval/success"),
    PlotSpec("length.png", "Episode length", ("episode/length",), eval_key="eval/length"),
    PlotSpec("kl_old_new.png", "KL(old || new)", ("policy/kl_old_new",), target="algo.target_kl"),
    PlotSpec("kl_ref_new.png", "KL(ref || new)", ("policy/kl_ref_new",), target="algo.target_kl"),
    PlotSpec("entropy.png", "Policy entropy", ("policy/entropy",)),
    PlotSpec("value_loss.png", "Value loss", ("value/loss",)),
    PlotSpec("explained_variance.png", "Value explained variance", ("value/explained_variance",)),
    PlotSpec("clip_frac.png", "Clip fraction", ("policy/clip_frac",)),
    PlotSpec(
        "collaboration.png", "Collaboration quality",
        ("episode/comm_effectiveness", "episode/conflicts", "episode/idle_rate"), panels=True,
    ),
    PlotSpec("directives.png", "Directive quality", ("episode/invalid_rate", "episode/repeat_rate"), panels=True),
    PlotSpec(
        "optim.png", "Optimiser", ("optim/grad_norm", "optim/lr", "optim/ent_coef", "optim/kl_coef"), panels=True,
        trend=False,
    ),
    PlotSpec("speed.png", "Speed", ("perf/decisions_per_s", "perf/iteration_s", "perf/collect_s", "perf/update_s"), panels=True),
    PlotSpec("bc.png", "Behaviour-cloning warm-up", ("bc/loss", "bc/accuracy", "bc/heldout_accuracy"), kind="bc",
             panels=True, x_label="step"),  # bc lines are numbered by optimiser step
)


def _smooth(values: list[float]) -> list[float]:
    """Trailing mean over a window of a tenth of the series: the trend under per-iteration noise."""
    return rolling_mean(values, max(2, len(values) // 10), centred=False)


def _suites(records: list[dict[str, Any]]) -> list[str]:
    return sorted({str(r["suite"]) for r in records if r.get("kind") == "eval" and "suite" in r})


def draw(spec: PlotSpec, records: list[dict[str, Any]], config: dict[str, Any] | None) -> Figure | None:
    """The figure of one plot spec; None when none of its metrics has a value."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = {key: metric_series(records, key, kind=spec.kind) for key in spec.keys}
    shown = [key for key in spec.keys if series[key][0]]
    evals: dict[str, tuple[list[int], list[float]]] = {}
    if spec.eval_key:
        evals = {s: metric_series(records, spec.eval_key, "eval", s) for s in _suites(records)}
        evals = {s: xy for s, xy in evals.items() if xy[0]}
    if not shown and not evals:
        return None
    n_axes = len(shown) if spec.panels else 1
    figure = Figure(figsize=(6.4, 2.2 * n_axes + 1.0 if spec.panels else 4.0))
    FigureCanvasAgg(figure)
    axes = figure.subplots(n_axes, 1, sharex=True, squeeze=False)[:, 0]
    for index, key in enumerate(shown):
        ax = axes[index if spec.panels else 0]
        xs, ys = series[key]
        faint = spec.trend and len(xs) >= 10
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None, alpha=0.4 if faint else 1.0, label=key)
        if spec.trend and len(xs) >= 10:
            ax.plot(xs, _smooth(ys), linewidth=2, label=f"{key} (trend)")
        ax.set_ylabel(key.split("/", 1)[-1])
    target = config_value(config, spec.target) if spec.target else None
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        axes[0].axhline(float(target), color="red", linestyle="--", label=f"{spec.target} = {target:g}")
    for suite, (xs, ys) in evals.items():
        axes[0].plot(xs, ys, marker="o", linestyle=":", label=f"eval {suite}")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    axes[-1].set_xlabel(spec.x_label)
    figure.suptitle(spec.title)
    figure.tight_layout()
    return figure


def _write_png(spec: PlotSpec, records: list[dict[str, Any]], config: dict[str, Any] | None, out: Path) -> bool:
    figure = draw(spec, records, config)
    if figure is None:
        return False
    figure.savefig(out / spec.file, dpi=90)
    return True


def latest_evals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The most recent eval line of each suite, sorted by suite name."""
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("kind") == "eval":
            suite = str(record.get("suite", "default"))
            if suite not in latest or record["iteration"] >= latest[suite]["iteration"]:
                latest[suite] = record
    return [latest[s] for s in sorted(latest)]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "&mdash;" if value is None else html.escape(str(value))


def _eval_table(records: list[dict[str, Any]]) -> str:
    rows = latest_evals(records)
    if not rows:
        return "<p>No evaluation yet.</p>"
    # The world's headline metrics (soups, landmarks covered) right after success: an evaluation line
    # holds the shared METRICS, ``episodes``, ``events/<kind>`` and the headline metrics (summarize).
    known = {f"eval/{m}" for m in (*METRICS, "episodes")}
    shown = sorted(k for k in {k for r in rows for k in r} if k.startswith("eval/") and k not in known
                   and not k.startswith("eval/events/"))
    columns = EVAL_COLUMNS[:1] + tuple(shown) + EVAL_COLUMNS[1:]
    head = "".join(f"<th>{html.escape(c.split('/', 1)[1])}</th>" for c in columns)
    body = "".join(
        f"<tr><td>{_cell(r.get('suite', 'default'))}</td><td>{r['iteration']}</td>"
        + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns)
        + "</tr>"
        for r in rows
    )
    return f"<table><tr><th>suite</th><th>iteration</th>{head}</tr>{body}</table>"


def _final_table(run: Path) -> str:
    """``final_eval.json`` as a table: one row per policy, its ``columns`` (else the shared metrics)
    first, then the rest."""
    path = run / FINAL_EVAL_FILE
    if not path.exists():
        return f"<p>No {FINAL_EVAL_FILE} in this run (it is written after training ends).</p>"
    try:
        table = read_json(path, "the end-of-run table")
    except TeamTRError as error:
        return f"<p>{html.escape(str(error))}</p>"
    rows = table.get("rows") if isinstance(table, dict) else None
    if not isinstance(rows, dict) or not all(isinstance(r, dict) for r in rows.values()):
        return f"<p>{html.escape(str(path))} has no rows {{policy: {{metric: value}}}}.</p>"
    present = {key for row in rows.values() for key in row}
    present = set(spread_columns(present))  # a metric's <metric>_std goes in its cell (with_spread)
    # The table's own column order (success, the world's headline metrics, the rest) when it has one.
    listed = table.get("columns")
    first = [c for c in listed if c in present] if isinstance(listed, list) else [m for m in METRICS if m in present]
    columns = first + sorted(present - set(first))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        f"<tr><td>{html.escape(str(policy))}</td>"
        + "".join(f"<td>{with_spread(row, c, pm='&plusmn;') or _cell(row.get(c))}</td>" for c in columns)
        + "</tr>"
        for policy, row in rows.items()
    )
    return f"<table class='final'><tr><th>policy</th>{head}</tr>{body}</table>"


def _summary(records: list[dict[str, Any]]) -> str:
    train = [r for r in records if r.get("kind") == "train"]
    if not train:
        return "<p>No training iterations logged yet.</p>"
    last = max(train, key=lambda r: r["iteration"])
    parts = [f"last iteration {last['iteration']}"]
    for key in ("episode/success", "episode/return", "perf/wall_time"):
        if isinstance(last.get(key), (int, float)):
            parts.append(f"{key} {last[key]:.3f}")
    return f"<p>{html.escape(', '.join(parts))}</p>"


_STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:75em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;font-size:90%}"
    "pre{white-space:pre-wrap;margin:0}img{max-width:48%;margin:4px}"
)


def _resumes(run: Path) -> str:
    """The run's resumes (``resumes.jsonl``): the iteration each went on from and the settings it changed,
    before -> after, since the config below holds only the latest, and the run it branched from (``teamtr
    branch``); empty for a run never resumed."""
    rows = read_resumes(run)
    if not rows:
        return ""
    lines = []
    for row in rows:
        changed = row.get("changed") or {}
        text = "; ".join(f"{k}: {before!r} -> {after!r}" for k, (before, after) in changed.items()) or "nothing"
        if row.get("branched_from"):  # teamtr branch: this run began as a copy of another at that iteration
            text = f"branched from {row['branched_from']}"
        lines.append(f"<tr><td>{html.escape(str(row.get('iteration', '')))}</td><td>{html.escape(str(row.get('time', '')))}"
                     f"</td><td>{html.escape(text)}</td></tr>")
    return ("<h2>Resumes</h2><table><tr><th>from iteration</th><th>time</th><th>settings changed</th></tr>"
            + "".join(lines) + "</table>")


def write_report(run_dir: str | Path, viewer: ViewerLimits = DEFAULT_LIMITS) -> Path:
    """Write ``run_dir/report/*.png`` and ``run_dir/report/index.html``; return the HTML's path.
    ``viewer`` bounds how many episodes, and how much of each, the page embeds."""
    run = Path(run_dir)
    require_run_dir(run)
    records = read_metrics(run)
    config = read_config(run)
    out = _report_dir(run)
    for stale in out.iterdir():
        # A figure whose metric vanished must not linger; a link must not be written through.
        if stale.suffix == ".png" or stale.is_symlink():
            stale.unlink()
    images = [spec for spec in PLOTS if _write_png(spec, records, config, out)]
    config_path = run / CONFIG_FILE
    config_text = config_path.read_text(encoding="utf-8") if config_path.exists() else "(no config.yaml)"
    figures = "".join(f'<img src="{s.file}" alt="{html.escape(s.title)}">' for s in images)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>TeamTR run {html.escape(run.name)}</title>"
        f"<style>{_STYLE}{viewer_css()}</style></head>"
        f"<body><h1>TeamTR run {html.escape(run.name)}</h1>{_summary(records)}"
        f"<h2>Curves</h2>{figures or '<p>No metrics yet.</p>'}"
        f"<h2>End-of-run table (held-out seeds)</h2>{_final_table(run)}"
        f"<h2>Latest evaluation</h2>{_eval_table(records)}"
        f"<h2>Episodes</h2>{viewer_section(run, viewer)}"
        f"{_resumes(run)}<h2>Config</h2><pre>{html.escape(config_text)}</pre>"
        f"<p><small>Written {time.strftime('%Y-%m-%d %H:%M:%S')} from {len(records)} metric lines.</small></p>"
        "</body></html>"
    )
    index = out / "index.html"
    atomic_write_text(index, page)  # replaces, never follows, whatever is there
    return index


def _report_dir(run: Path) -> Path:
    """``run/report``, created; refused when it is a symlink or not a folder, so nothing is written
    or deleted outside the run."""
    out = run / REPORT_DIR
    if out.is_symlink():
        raise TeamTRError(f"{out} is a symlink (to {os.readlink(out)}); a report is written only inside its run: "
                          f"remove the link (rm {out}) and run the report again.")
    if out.exists() and not out.is_dir():
        raise TeamTRError(f"{out} exists and is not a folder; move it away and run the report again.")
    out.mkdir(exist_ok=True)
    return out
