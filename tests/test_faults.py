"""Runs and checkpoints under faults: damaged newest checkpoints, torn transcripts, two trainers on
one run directory, non-finite and mismatched weights."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator, build_coordinator
from teamtr.train.checkpoint import list_checkpoints, validate_checkpoint
from teamtr.train.lock import RunLock
from teamtr.train.trainer import Trainer

TINY = [
    "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=4", "rollout.parallel=4",
    "train.iterations=2", "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0",
    "train.keep_checkpoints=3", "algo.minibatch_size=32", "algo.epochs=1", "log.tensorboard=false",
    "env.max_steps=5",
]


def config(run: Path, *extra: str):
    return load_config(None, [*TINY, f"run_dir={run}", *extra])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A run of 2 iterations with checkpoints iter_1 and iter_2."""
    run = tmp_path_factory.mktemp("faults") / "run"
    with Trainer(config(run)) as trainer:
        trainer.run()
    assert [p.name for p in list_checkpoints(run)] == ["iter_000001", "iter_000002"]
    return run


def copy_run(finished_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / ".lock").unlink(missing_ok=True)
    return run


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "truncated safetensors": (lambda c: truncate(c / "coordinator" / "adapter" / "adapter_model.safetensors"),
                              "adapter_model.safetensors: not a readable safetensors file"),
    "garbage safetensors": (lambda c: (c / "algo.safetensors").write_bytes(b"\x00garbage" * 64),
                            "algo.safetensors: not a readable safetensors file"),
    "missing trainer.json": (lambda c: (c / "trainer.json").unlink(), "trainer.json: missing"),
    "torn JSON": (lambda c: truncate(c / "trainer.json"), "trainer.json: not valid JSON"),
    "empty iter_N": (lambda c: (shutil.rmtree(c), c.mkdir()), "empty folder"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_newest_checkpoint_resumes_from_the_previous_one(finished_run, tmp_path, capsys, case):
    run = copy_run(finished_run, tmp_path)
    damage, reason = DAMAGE[case]
    newest = run / "checkpoints" / "iter_000002"
    damage(newest)
    assert validate_checkpoint(newest) is not None and reason in validate_checkpoint(newest)
    trainer = Trainer(config(run), resume=True)
    try:
        assert trainer.iteration == 1
        out = capsys.readouterr().out
        skipped = [line for line in out.splitlines() if "skipped checkpoint iter_000002: " in line]
        assert len(skipped) == 1 and reason in skipped[0], out
        assert "continuing from iter_000001" in out
        assert [p.name for p in list_checkpoints(run)] == ["iter_000001"]
        assert (run / "checkpoints" / "damaged-iter_000002").is_dir()  # kept for a person to look at
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["iteration"] for r in rows if r["kind"] == "train"] == [1]
    finally:
        trainer.close()


def test_torn_transcript_tail_does_not_break_resume(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path)
    shutil.rmtree(run / "checkpoints" / "iter_000002")  # as if killed before the second checkpoint
    with open(run / "transcripts.jsonl", "a") as f:
        f.write('{"iteration": 2, "seed": 12, "ta')  # killed mid-line
    with Trainer(config(run), resume=True) as trainer:
        assert trainer.iteration == 1
        trainer.run()
    rows = [json.loads(x) for x in (run / "transcripts.jsonl").read_text().splitlines()]
    assert sorted({r["iteration"] for r in rows}) == [1, 2]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in metrics if r["kind"] == "train"] == [1, 2]


def test_a_second_trainer_on_the_same_run_directory_is_refused(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path)
    first = Trainer(config(run, "train.iterations=3"), resume=True)
    try:
        with pytest.raises(TeamTRError, match=rf"run directory .*run is in use by another trainer \(pid {os.getpid()}\)"):
            Trainer(config(run, "train.iterations=3"), resume=True)
    finally:
        first.close()
    second = Trainer(config(run, "train.iterations=3"), resume=True)  # released on close
    second.close()


def test_the_lock_refuses_another_process_and_names_the_holder(tmp_path):
    lock = RunLock(tmp_path)
    code = f"from teamtr.train.lock import RunLock; RunLock({str(tmp_path)!r})"
    src = str(Path(__file__).resolve().parents[1] / "src")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": src})
    assert done.returncode != 0 and f"in use by another trainer (pid {os.getpid()})" in done.stderr
    lock.release()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": src})
    assert done.returncode == 0, done.stderr


def test_nan_adapter_is_refused(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path)
    path = run / "checkpoints" / "iter_000002" / "coordinator" / "adapter" / "adapter_model.safetensors"
    state = load_file(str(path))
    key = sorted(state)[0]
    state[key] = state[key].clone()
    state[key].view(-1)[0] = float("nan")
    save_file(state, str(path))
    coordinator = build_coordinator(config(run))
    before = {k: v.clone() for k, v in coordinator.adapter_state().items()}
    with pytest.raises(TeamTRError, match=r"adapter_model.safetensors: 1 weight tensor\(s\) hold NaN or inf"):
        coordinator.load(path.parents[1])
    assert all(torch.equal(v, coordinator.adapter_state()[k]) for k, v in before.items())  # nothing loaded
    with pytest.raises(TeamTRError, match="NaN or inf"):
        Trainer(config(run), resume=True)


def test_wrong_backbone_or_lora_is_refused(finished_run):
    saved = finished_run / "checkpoints" / "iter_000002" / "coordinator"
    four = Coordinator(load_backbone("tiny-random-4", device="cpu"))
    with pytest.raises(TeamTRError, match=r"trained on backbone tiny-random \(2 layers, hidden \d+.*this config loads "
                                          r"tiny-random-4 \(4 layers.*--set model.backbone=tiny-random"):
        four.load(saved)
    with pytest.raises(TeamTRError, match=r"rank=8.*rank=4.*--set model.lora.rank=8"):
        build_coordinator(config(finished_run, "model.lora.rank=4")).load(saved)
