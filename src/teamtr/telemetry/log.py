"""Run logging: ``metrics.jsonl`` always, TensorBoard by default, Weights & Biases on request.

A run directory holds one ``metrics.jsonl``: one JSON object per line, each with ``kind``
(``train``, ``eval`` or ``bc``), ``iteration`` (int), ``time`` (unix seconds) and flat,
namespaced metric keys (``episode/return``, ``policy/kl_old_new``, ``eval/success``...). Eval lines
also carry ``suite`` ("heldout", "agents=4"...). Every line is flushed and fsync'ed as it is
written, so a run killed with SIGKILL keeps every complete line. Non-finite floats are written as
``null`` so the file stays standard JSON (``jq`` and browsers read it).

Resuming from the checkpoint of iteration ``k`` drops every line with ``iteration > k`` (the work of
the interrupted iterations, which the resumed run does again), so the file has neither duplicated
nor missing lines. The trainer must therefore log everything of iteration ``k`` (its train line and
any eval) *before* it writes the checkpoint of ``k``.

The console view of a run (bars or plain lines) is ``telemetry/progress.py``.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from teamtr.atomic import atomic_write_text
from teamtr.core import TeamTRError

METRICS_FILE = "metrics.jsonl"
TRANSCRIPTS_FILE = "transcripts.jsonl"  # training episodes (log.transcripts a rollout; the report's viewer)
CONFIG_FILE = "config.yaml"
RESUMES_FILE = "resumes.jsonl"  # each resume: its iteration and the settings it changed (train/resume.py)
TENSORBOARD_DIR = "tb"
WANDB_ID_FILE = "wandb_id.txt"
FINAL_EVAL_FILE = "final_eval.json"  # the end-of-run table (cli.final_table)
FINAL_PARTIAL_FILE = "final_eval.partial.json"  # an end-of-run table's finished policies while it is played
EVAL_TRANSCRIPTS_FILE = "eval_transcripts.jsonl"  # the end-of-run table's episodes (the report's viewer)
KINDS: tuple[str, ...] = ("train", "eval", "bc", "roles")  # roles: the LLM role agents' tuning (train/roles.py)


def _metrics_path(run_dir: str | Path) -> Path:
    path = Path(run_dir)
    return path if path.suffix == ".jsonl" else path / METRICS_FILE


def parse_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, JSON value) of each non-blank line of ``path`` (``[]`` when missing). A torn last line (a kill
    mid-write) is dropped; a bad line elsewhere is a damaged file: ``TeamTRError`` naming the line."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    rows: list[tuple[int, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            if number == len(lines):  # only the last line can be torn by a kill
                break
            raise TeamTRError(f"{path}:{number} is not valid JSON ({error}); fix or remove that line.") from None
    return rows



def headline_row(rows: Mapping[str, Any]) -> dict[str, float]:
    """The trained row of an end-of-run table (``final_eval.json``'s ``rows``): ``trained``, or a suite's
    held-out-seeds row ``trained @ heldout`` (its other rows, one agent more or held-out names, are tests
    beside it); for a run over several layouts the mean of each metric over its ``trained @ layout=X`` rows
    (every layout weighing the same; a layout left out of training, ``... unseen``, is a test too); {} when
    there is none."""
    for name in ("trained", "trained @ heldout"):
        if isinstance(rows.get(name), Mapping):
            return dict(rows[name])
    layouts = [row for label, row in rows.items() if label.startswith("trained @ layout=")
               and not label.endswith(" unseen") and isinstance(row, Mapping)]
    keys = [k for k in layouts[0] if all(isinstance(r.get(k), (int, float)) for r in layouts)] if layouts else []
    return {k: statistics.fmean(r[k] for r in layouts) for k in keys}


def read_resumes(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a run's ``resumes.jsonl`` (``[]`` for a run never resumed; a torn last line dropped)."""
    return [row for _, row in parse_jsonl(Path(run_dir) / RESUMES_FILE) if isinstance(row, dict)]

def _parse_lines(path: Path) -> list[dict[str, Any]]:
    """Parse a metrics file; a torn last line (the run was killed mid-write) is dropped."""
    records = parse_jsonl(path)
    for number, record in records:
        if not isinstance(record, dict) or "iteration" not in record or "kind" not in record:
            raise TeamTRError(f"{path}:{number} is not a metrics record (needs 'kind' and 'iteration').")
    return [record for _, record in records]


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of a run's ``metrics.jsonl`` (or of the ``.jsonl`` file given), in file order.

    A missing file gives ``[]``; a torn last line is skipped; any other bad line raises ``TeamTRError``
    naming the file and line number.
    """
    return _parse_lines(_metrics_path(run_dir))


def require_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a Path; ``TeamTRError`` naming it when it is not a directory."""
    path = Path(run_dir)
    if not path.is_dir():
        raise TeamTRError(f"run directory {str(path)!r} does not exist; give the directory `teamtr train` wrote.")
    return path


def read_config(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's resolved ``config.yaml`` as a dict, or ``None`` when the run has none."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        return None
    import yaml

    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else None


def config_value(config: Mapping[str, Any] | None, dotted: str) -> Any:
    """``config["algo"]["clip_eps"]`` for ``"algo.clip_eps"``; ``None`` when any part is missing."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def metric_series(
    records: list[dict[str, Any]], key: str, kind: str = "train", suite: str | None = None
) -> tuple[list[int], list[float]]:
    """``(iterations, values)`` of one metric, sorted by iteration, for lines of ``kind`` (and ``suite``).

    When an iteration appears twice (a run resumed without truncation) the later line wins, so
    plots and diagnoses never count an iteration twice. Missing and null values are skipped.
    """
    by_iteration: dict[int, float] = {}
    for record in records:
        if record.get("kind") != kind or (suite is not None and record.get("suite") != suite):
            continue
        value = record.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):  # bools count as 0/1
            by_iteration[int(record["iteration"])] = float(value)
    iterations = sorted(by_iteration)
    return iterations, [by_iteration[i] for i in iterations]


def truncate_metrics(run_dir: str | Path, iteration: int, keep_kinds: tuple[str, ...] = ()) -> int:
    """Drop every line with ``iteration > iteration`` (and a torn last line); return how many were dropped.

    Lines whose kind is in ``keep_kinds`` are kept whatever their iteration (e.g. ``("bc",)`` when the
    warm-up numbers its own steps and is never redone by a resume).

    The file is rewritten atomically (temporary file in the same directory, fsync, ``os.replace``):
    a kill during the rewrite leaves either the old or the new file, never a mix.
    """
    path = _metrics_path(run_dir)
    if not path.exists():
        return 0
    records = _parse_lines(path)
    kept = [r for r in records if int(r["iteration"]) <= iteration or r["kind"] in keep_kinds]
    atomic_write_text(path, "".join(json.dumps(record) + "\n" for record in kept))
    return len(records) - len(kept)


def _json_value(value: Any) -> Any:
    """Make a metric JSON-safe: numpy/torch scalars to Python numbers, non-finite floats to None."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric, finite metrics (bools as 0/1): what TensorBoard and W&B can plot."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or isinstance(value, (int, float)):
            number = float(value)
            if math.isfinite(number):
                out[key] = number
    return out


class RunLogger:
    """Append metric lines to ``run_dir/metrics.jsonl`` and mirror them to TensorBoard and W&B.

    Args:
        run_dir: the run directory (created if missing).
        tensorboard: write TensorBoard events under ``run_dir/tb``.
        wandb: also log to Weights & Biases (``pip install 'teamtr[wandb]'``); ``WANDB_MODE=offline``
            logs under ``run_dir/wandb`` with no network. A resumed run reuses the W&B run id saved in
            ``run_dir/wandb_id.txt``.
        wandb_project: the W&B project name.
        config: the resolved config, stored with the W&B run.
        resume_iteration: resuming from the checkpoint of this iteration: lines with a larger
            iteration are dropped from ``metrics.jsonl`` and TensorBoard events after it are purged.
        keep_kinds: kinds a resume never drops, numbered on their own axis (``("bc",)``); their
            TensorBoard events go to ``tb/<kind>``, out of reach of the purge.
    """

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "teamtr",
        config: Mapping[str, Any] | None = None,
        resume_iteration: int | None = None,
        keep_kinds: tuple[str, ...] = (),
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        if resume_iteration is not None:
            if isinstance(resume_iteration, bool) or not isinstance(resume_iteration, int) or resume_iteration < 0:
                raise ValueError(f"resume_iteration={resume_iteration!r}: expected an iteration number >= 0.")
            truncate_metrics(self.run_dir, resume_iteration, keep_kinds)
        else:
            self._drop_torn_tail()
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8")
        self._tb: dict[str, Any] = {}  # kind ("" for the shared writer) -> SummaryWriter
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step makes TensorBoard hide events the interrupted iterations had written.
            purge = None if resume_iteration is None else resume_iteration + 1
            self._tb[""] = SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), purge_step=purge)
            for kind in keep_kinds:
                self._tb[kind] = SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR / kind))
        self._wandb: Any = None
        if wandb:
            self._wandb = self._start_wandb(wandb_project, config)

    def _drop_torn_tail(self) -> None:
        """Cut a partial last line left by a kill, so the next line does not glue onto it."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def _start_wandb(self, project: str, config: Mapping[str, Any] | None) -> Any:
        try:
            import wandb
        except ImportError:
            raise TeamTRError(
                "log.wandb is true but Weights & Biases is not installed: pip install 'teamtr[wandb]'"
            ) from None
        id_file = self.run_dir / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id + "\n")
        run = wandb.init(
            project=project,
            dir=str(self.run_dir),
            config=dict(config) if config is not None else None,
            id=run_id,
            resume="allow",
            name=self.run_dir.name,
        )
        # Plot against our iteration rather than W&B's own step, which must only grow and
        # would reject the repeated iterations of a resumed run.
        run.define_metric("iteration")
        run.define_metric("*", step_metric="iteration")
        return run

    def log(self, kind: str, iteration: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Write one line; return the record written.

        Args:
            kind: ``train``, ``eval`` or ``bc``.
            iteration: the training iteration the metrics belong to.
            metrics: flat, namespaced metrics; an eval line should include ``suite``.
        """
        if self._file is None:
            raise RuntimeError("RunLogger.log called after close().")
        if kind not in KINDS:
            raise ValueError(f"metric kind {kind!r} is not one of {', '.join(KINDS)}.")
        if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
            raise ValueError(f"iteration={iteration!r}: expected an int >= 0.")
        for reserved in ("kind", "iteration", "time"):
            if reserved in metrics:
                raise ValueError(f"metric key {reserved!r} is reserved; RunLogger.log sets it.")
        record: dict[str, Any] = {"kind": kind, "iteration": iteration, "time": time.time()}
        values = {str(k): _json_value(v) for k, v in metrics.items()}
        record.update(values)
        try:
            line = json.dumps(record, allow_nan=False)
        except TypeError as error:
            raise TypeError(
                f"metrics for {kind} iteration {iteration} hold a value JSON cannot store: {error}"
            ) from error
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        scalars = _scalars(values)
        if kind == "eval" and "suite" in metrics:
            # One curve per suite: eval/success -> eval/heldout/success.
            suite = str(metrics["suite"])
            scalars = {k.replace("eval/", f"eval/{suite}/", 1): v for k, v in scalars.items()}
        writer = self._tb.get(kind, self._tb.get(""))
        if writer is not None:
            for key, value in scalars.items():
                writer.add_scalar(key, value, global_step=iteration)
            writer.flush()
        if self._wandb is not None:
            self._wandb.log({**scalars, "iteration": iteration})
        return record

    def close(self) -> None:
        """Flush and close every sink; safe to call twice."""
        if self._file is not None:
            self._file.close()
            self._file = None
        for writer in self._tb.values():
            writer.close()
        self._tb = {}
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
