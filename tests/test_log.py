"""RunLogger, read_metrics and truncate_metrics on real files in tmp dirs (Progress: test_progress.py)."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from teamtr.core import TeamTRError

from teamtr.telemetry.log import RunLogger, read_metrics, truncate_metrics


def _write_run(run_dir: Path, iterations: int, evals_every: int = 2) -> None:
    with RunLogger(run_dir, tensorboard=False) as logger:
        for it in range(iterations):
            logger.log("train", it, {"episode/return": float(it), "episode/success": it / 10})
            if it % evals_every == 0:
                logger.log("eval", it, {"suite": "heldout", "eval/success": it / 10})


def test_lines_have_kind_iteration_time_and_metrics(tmp_path: Path) -> None:
    _write_run(tmp_path, 5)
    records = read_metrics(tmp_path)
    assert [(r["kind"], r["iteration"]) for r in records] == [
        ("train", 0), ("eval", 0), ("train", 1), ("train", 2), ("eval", 2),
        ("train", 3), ("train", 4), ("eval", 4),
    ]
    assert records[-2]["episode/return"] == 4.0
    assert records[-1]["suite"] == "heldout" and records[-1]["eval/success"] == pytest.approx(0.4)
    assert all(isinstance(r["time"], float) for r in records)


def test_non_finite_values_become_null_and_the_file_is_standard_json(tmp_path: Path) -> None:
    with RunLogger(tmp_path, tensorboard=False) as logger:
        logger.log("train", 0, {"policy/loss": math.nan, "value/loss": math.inf, "episode/return": 1.5})
    line = (tmp_path / "metrics.jsonl").read_text().strip()
    assert "NaN" not in line and "Infinity" not in line
    record = json.loads(line)
    assert record["policy/loss"] is None and record["value/loss"] is None and record["episode/return"] == 1.5


def test_resume_drops_exactly_the_lines_after_the_checkpoint(tmp_path: Path) -> None:
    _write_run(tmp_path, 10)  # train 0..9, eval at 0,2,4,6,8
    before = read_metrics(tmp_path)
    assert len(before) == 15
    # Killed mid-write of iteration 10: a torn line at the end.
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write('{"kind": "train", "iteration": 10, "episode/ret')
    with RunLogger(tmp_path, tensorboard=False, resume_iteration=6) as logger:
        kept = read_metrics(tmp_path)
        # train 0..6 (7 lines) + eval 0,2,4,6 (4 lines); nothing later survives.
        assert len(kept) == 11
        assert max(r["iteration"] for r in kept) == 6
        assert kept == [r for r in before if r["iteration"] <= 6]
        for it in range(7, 10):
            logger.log("train", it, {"episode/return": float(it)})
    after = read_metrics(tmp_path)
    train_iterations = [r["iteration"] for r in after if r["kind"] == "train"]
    assert train_iterations == list(range(10))  # no duplicate, none missing


def test_a_run_killed_with_sigkill_keeps_every_line_it_logged(tmp_path: Path) -> None:
    child = (
        "import sys\n"
        "from teamtr.telemetry.log import RunLogger\n"
        f"logger = RunLogger({str(tmp_path)!r}, tensorboard=False)\n"
        "i = 0\n"
        "while True:\n"
        "    logger.log('train', i, {'episode/return': float(i), 'pad': 'x' * 500})\n"
        "    print(i, flush=True)\n"
        "    i += 1\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    announced = [int(proc.stdout.readline()) for _ in range(50)]
    proc.send_signal(signal.SIGKILL)  # no close(), no atexit: only what log() made durable survives
    proc.wait()
    iterations = [r["iteration"] for r in read_metrics(tmp_path)]
    assert iterations[: len(announced)] == announced  # every announced line is there, in order
    assert iterations == list(range(len(iterations)))  # and nothing is torn or doubled


def test_truncate_counts_dropped_lines_and_leaves_no_temp_file(tmp_path: Path) -> None:
    _write_run(tmp_path, 6)
    assert truncate_metrics(tmp_path, 3) == 3  # train 4, train 5 and eval 4
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
    assert truncate_metrics(tmp_path / "missing", 3) == 0


def test_torn_tail_is_cut_before_appending_without_resume(tmp_path: Path) -> None:
    _write_run(tmp_path, 2)
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write('{"kind": "tr')
    with RunLogger(tmp_path, tensorboard=False) as logger:
        logger.log("train", 2, {"episode/return": 2.0})
    records = read_metrics(tmp_path)
    assert [r["iteration"] for r in records if r["kind"] == "train"] == [0, 1, 2]


def test_a_damaged_middle_line_names_file_and_line(tmp_path: Path) -> None:
    good = '{"kind": "train", "iteration": 0}\n'
    (tmp_path / "metrics.jsonl").write_text(good + "not json\n" + good)
    with pytest.raises(TeamTRError, match=r"metrics.jsonl:2 is not valid JSON"):
        read_metrics(tmp_path)


@pytest.mark.parametrize(
    ("kind", "iteration", "metrics", "message"),
    [
        ("ppo", 0, {}, "metric kind 'ppo' is not one of train, eval, bc"),
        ("train", -1, {}, "iteration=-1"),
        ("train", 0, {"iteration": 3}, "metric key 'iteration' is reserved"),
    ],
)
def test_bad_calls_name_the_bad_value(
    tmp_path: Path, kind: str, iteration: int, metrics: dict[str, int], message: str
) -> None:
    with RunLogger(tmp_path, tensorboard=False) as logger, pytest.raises(ValueError, match=message):
        logger.log(kind, iteration, metrics)


def test_tensorboard_events_hold_the_scalars_per_suite(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunLogger(tmp_path) as logger:
        for it in range(3):
            logger.log("train", it, {"episode/return": 2.0 * it, "note": "text is not plotted"})
        logger.log("eval", 2, {"suite": "agents=4", "eval/success": 0.75})
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["episode/return", "eval/agents=4/success"]
    assert [(e.step, e.value) for e in events.Scalars("episode/return")] == [(0, 0.0), (1, 2.0), (2, 4.0)]
    assert events.Scalars("eval/agents=4/success")[0].value == pytest.approx(0.75)


def test_missing_wandb_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # what Python does for a package that is absent
    with pytest.raises(TeamTRError, match=r"pip install 'teamtr\[wandb\]'"):
        RunLogger(tmp_path, tensorboard=False, wandb=True)


def test_wandb_offline_writes_a_run_dir_and_resume_reuses_the_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    run_dir = tmp_path / "run"
    with RunLogger(run_dir, tensorboard=False, wandb=True, config={"algo": {"clip_eps": 0.2}}) as logger:
        logger.log("train", 0, {"episode/return": 1.0})
    run_id = (run_dir / "wandb_id.txt").read_text().strip()
    with RunLogger(run_dir, tensorboard=False, wandb=True, resume_iteration=0) as logger:
        logger.log("train", 1, {"episode/return": 2.0})
    offline_runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 2 and all(f"-{run_id}" in p.name for p in offline_runs)
    assert all((p / f"run-{run_id}.wandb").stat().st_size > 0 for p in offline_runs)


def test_keep_kinds_survive_a_resume_in_jsonl_and_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunLogger(tmp_path, keep_kinds=("bc",)) as logger:
        for step in range(6):  # the warm-up numbers its own steps 0..5
            logger.log("bc", step, {"bc/loss": 1.0 / (step + 1)})
        for it in range(4):
            logger.log("train", it, {"episode/return": float(it)})
    with RunLogger(tmp_path, keep_kinds=("bc",), resume_iteration=1) as logger:
        logger.log("train", 2, {"episode/return": 20.0})
    records = read_metrics(tmp_path)
    assert [r["iteration"] for r in records if r["kind"] == "bc"] == [0, 1, 2, 3, 4, 5]
    assert [r["iteration"] for r in records if r["kind"] == "train"] == [0, 1, 2]
    bc_events = EventAccumulator(str(tmp_path / "tb" / "bc"))
    bc_events.Reload()
    assert [e.step for e in bc_events.Scalars("bc/loss")] == [0, 1, 2, 3, 4, 5]
    train_events = EventAccumulator(str(tmp_path / "tb"))
    train_events.Reload()  # the purge hides the interrupted iterations' events, as the JSONL drops them
    assert [(e.step, e.value) for e in train_events.Scalars("episode/return")] == [(0, 0.0), (1, 1.0), (2, 20.0)]
