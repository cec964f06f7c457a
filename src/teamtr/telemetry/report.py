"""The run report: PNG curves and one HTML page (curves, config, latest eval table, a sample transcript).

``write_report(run_dir)`` reads ``metrics.jsonl``, ``config.yaml`` and ``transcripts.jsonl`` and
writes ``run_dir/report/*.png`` and ``run_dir/report/index.html``. It works on partial runs: a figure
whose metrics are all missing is not drawn, and a missing file leaves its section saying so.

Matplotlib is used through ``Figure`` + the Agg canvas directly, never ``pyplot``, so writing a
report changes no global backend of the caller's process and needs no display.
"""

from __future__ import annotations

import html
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from teamtr.atomic import atomic_write_text
from teamtr.core import TeamTRError
from teamtr.telemetry.doctor import rolling_mean
from teamtr.telemetry.log import (
    CONFIG_FILE, config_value, metric_series, read_config, read_metrics, require_run_dir,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPORT_DIR = "report"
TRANSCRIPTS_FILE = "transcripts.jsonl"
#: Transcript steps shown in the HTML; a longer episode is cut with a note.
MAX_TRANSCRIPT_STEPS = 100
EVAL_COLUMNS: tuple[str, ...] = (
    "eval/success", "eval/return", "eval/length", "eval/conflicts",
    "eval/idle_rate", "eval/comm_effectiveness", "eval/invalid_rate",
)


@dataclass(frozen=True)
class PlotSpec:
    """One PNG: ``keys`` drawn against iteration (one panel per key when ``panels``).

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
    PlotSpec("speed.png", "Speed", ("perf/decisions_per_s", "perf/iteration_s"), panels=True),
    PlotSpec("bc.png", "Behaviour-cloning warm-up", ("bc/loss", "bc/accuracy", "bc/heldout_accuracy"), kind="bc",
             panels=True),
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
    axes[-1].set_xlabel("iteration")
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


def pick_transcript(path: Path) -> dict[str, Any] | None:
    """The last successful episode in a transcripts file, else its last episode; None if there is none."""
    if not path.exists():
        return None
    last: dict[str, Any] | None = None
    last_success: dict[str, Any] | None = None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                episode = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a killed run
            if not isinstance(episode, dict):
                continue
            last = episode
            if episode.get("success"):
                last_success = episode
    return last_success if last_success is not None else last


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "&mdash;" if value is None else html.escape(str(value))


def _eval_table(records: list[dict[str, Any]]) -> str:
    rows = latest_evals(records)
    if not rows:
        return "<p>No evaluation yet.</p>"
    head = "".join(f"<th>{html.escape(c.split('/', 1)[1])}</th>" for c in EVAL_COLUMNS)
    body = "".join(
        f"<tr><td>{_cell(r.get('suite', 'default'))}</td><td>{r['iteration']}</td>"
        + "".join(f"<td>{_cell(r.get(c))}</td>" for c in EVAL_COLUMNS)
        + "</tr>"
        for r in rows
    )
    return f"<table><tr><th>suite</th><th>iteration</th>{head}</tr>{body}</table>"


def _transcript_html(episode: dict[str, Any] | None) -> str:
    if episode is None:
        return "<p>No transcripts.jsonl in this run.</p>"
    steps = episode.get("steps") or []
    outcome = "success" if episode.get("success") else "failure"
    title = (
        f"Sample transcript: iteration {_cell(episode.get('iteration'))}, seed {_cell(episode.get('seed'))}, "
        f"{outcome}, return {_cell(episode.get('return'))}, {len(steps)} decisions"
    )
    rows = []
    for step in steps[:MAX_TRANSCRIPT_STEPS]:
        choice = step.get("choice")
        candidates = "".join(
            f"<li><b>{html.escape(str(c))} &larr;</b></li>" if i == choice else f"<li>{html.escape(str(c))}</li>"
            for i, c in enumerate(step.get("candidates") or [])
        )
        rows.append(
            f"<tr><td>{_cell(step.get('tick'))}</td><td><pre>{_cell(step.get('state'))}</pre></td>"
            f"<td><ol start=0>{candidates}</ol></td><td>{_cell(step.get('directive'))}</td>"
            f"<td>{_cell(step.get('reward'))}</td>"
            f"<td>{_cell(', '.join(map(str, step.get('events') or [])))}</td></tr>"
        )
    cut = len(steps) - MAX_TRANSCRIPT_STEPS
    note = f"<p>&hellip; {cut} more decisions not shown.</p>" if cut > 0 else ""
    return (
        f"<h3>{title}</h3><table><tr><th>tick</th><th>state</th><th>candidates (chosen &larr;)</th>"
        f"<th>directive</th><th>reward</th><th>events</th></tr>{''.join(rows)}</table>{note}"
    )


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


def write_report(run_dir: str | Path) -> Path:
    """Write ``run_dir/report/*.png`` and ``run_dir/report/index.html``; return the HTML's path."""
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
        f"<style>{_STYLE}</style></head><body><h1>TeamTR run {html.escape(run.name)}</h1>{_summary(records)}"
        f"<h2>Curves</h2>{figures or '<p>No metrics yet.</p>'}"
        f"<h2>Latest evaluation</h2>{_eval_table(records)}"
        f"<h2>Sample transcript</h2>{_transcript_html(pick_transcript(run / TRANSCRIPTS_FILE))}"
        f"<h2>Config</h2><pre>{html.escape(config_text)}</pre>"
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
