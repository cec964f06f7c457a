"""teamtr status: where each run under a folder stands, read from its files and its lock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from teamtr.cli import main
from teamtr.train.lock import RunLock, lock_holder
from teamtr.train.status import find_runs, format_status, run_status


def _run(path: Path, iterations: int, seconds: list[float], bc_steps: int = 0, final: dict | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(f"env: {{name: escape-room}}\ntrain: {{iterations: {iterations}}}\n")
    lines = [{"kind": "bc", "iteration": s, "bc/loss": 1.0, "perf/wall_time": 30.0 * s} for s in range(1, bc_steps + 1)]
    for i, sec in enumerate(seconds, start=1):
        lines.append({"kind": "train", "iteration": i, "episode/success": i / 10, "perf/iteration_s": sec})
    if seconds:
        lines.append({"kind": "eval", "iteration": len(seconds), "suite": "heldout", "eval/success": 0.75})
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if final is not None:
        (path / "final_eval.json").write_text(json.dumps({"rows": final}))
    (path / "checkpoints" / "iter_000001").mkdir(parents=True)
    (path / "checkpoints" / "iter_000001" / "config.yaml").write_text("not a run\n")  # never listed
    return path


def test_a_stopped_run_says_its_iteration_success_and_time_left(tmp_path):
    run = _run(tmp_path / "sweep" / "seed_0", iterations=5, seconds=[60.0, 120.0, 90.0], bc_steps=4)
    row = run_status(run)
    assert row["state"] == "stopped" and row["phase"] == "iteration 3/5"
    assert row["train_success"] == pytest.approx(0.3) and row["eval_success"] == 0.75
    assert row["seconds"] == pytest.approx(120.0 + 270.0)  # cloning's wall time + the iterations
    assert row["seconds_left"] == pytest.approx(2 * 90.0)  # 2 iterations at the median
    assert row["final_success"] is None


def test_running_cloning_and_done_runs(tmp_path):
    cloning = _run(tmp_path / "a", iterations=5, seconds=[], bc_steps=7)
    lock = RunLock(cloning)
    try:
        assert lock_holder(cloning) == os.getpid()
        row = run_status(cloning)
        assert row["state"] == f"running (pid {os.getpid()})" and row["phase"] == "cloning, step 7"
    finally:
        lock.release()
    assert lock_holder(cloning) is None and run_status(cloning)["state"] == "stopped"
    layouts = {"trained @ layout=a": {"success": 1.0}, "trained @ layout=b": {"success": 0.5},
               "heuristic @ layout=a": {"success": 0.0}, "trained @ layout=c unseen": {"success": 0.0}}
    done = _run(tmp_path / "b", iterations=2, seconds=[10.0, 10.0], final=layouts)
    row = run_status(done)
    assert (row["state"], row["phase"], row["final_success"]) == ("done", "done", 0.75)
    assert "seconds_left" not in row
    suite = {"trained @ heldout": {"success": 1.0}, "trained @ engineers=3": {"success": 1.0},
             "trained @ names=heldout": {"success": 0.565}, "oracle @ heldout": {"success": 1.0}}
    assert run_status(_run(tmp_path / "g", iterations=2, seconds=[10.0], final=suite))["final_success"] == 1.0
    first = _run(tmp_path / "d", iterations=30, seconds=[])  # RL alone, its first iteration under way
    assert run_status(first)["phase"] == "iteration 0/30" and "seconds_left" not in run_status(first)
    table = _run(tmp_path / "c", iterations=2, seconds=[10.0, 10.0])  # trained, its table not yet written
    assert run_status(table)["phase"] == "end-of-run table"


def test_a_curriculum_run_says_the_stage_its_last_iteration_trained_on(tmp_path):
    run = _run(tmp_path / "c", iterations=30, seconds=[60.0, 60.0, 60.0])
    (run / "config.yaml").write_text("env: {name: escape-room}\ntrain: {iterations: 30}\n"
                                     "curriculum: {stages: [{env: {names: default}, success: 0.8}]}\n")
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for line, stage in zip((x for x in lines if x["kind"] == "train"), (0, 0, 1)):
        line["curriculum/stage"] = stage
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert run_status(run)["phase"] == "iteration 3/30, stage 2/2"  # moved on to the task itself
    assert run_status(run)["seconds_left"] == pytest.approx(27 * 60.0)
    paced = _run(tmp_path / "s", iterations=10, seconds=[300.0] * 4 + [100.0, 120.0, 110.0, 90.0, 100.0])
    assert run_status(paced)["seconds_left"] == pytest.approx(100.0)  # the last 5's median, not all 9's (120)
    plain = _run(tmp_path / "p", iterations=30, seconds=[60.0])
    assert run_status(plain)["phase"] == "iteration 1/30"


def test_the_command_lists_runs_below_a_folder_and_refuses_a_missing_one(tmp_path, capsys):
    _run(tmp_path / "sweep" / "seed_0", iterations=4, seconds=[60.0])
    _run(tmp_path / "sweep" / "seed_1", iterations=4, seconds=[60.0, 60.0, 60.0, 60.0], final={"trained": {"success": 1.0}})
    assert [p.name for p in find_runs([tmp_path])] == ["seed_0", "seed_1"]
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["run", "world", "state", "phase"]
    assert "iteration 1/4" in out[1] and "~3m" in out[1] and "1.000" in out[2] and "done" in out[2]
    assert main(["status", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["phase"] for r in rows] == ["iteration 1/4", "done"]
    assert main(["status", str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert format_status([]).startswith("run")
