"""teamtr branch: a new run standing at an earlier checkpoint; resumed unchanged it replays the original
exactly, resumed with a new step it goes its own way; the original is never touched."""

import json
from pathlib import Path

import pytest

from teamtr.cli import main
from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.policy.card import model_card
from teamtr.telemetry.report import write_report
from teamtr.train.branch import branch_run
from teamtr.train.trainer import Trainer

TINY = [
    "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=4", "rollout.parallel=4",
    "train.eval_every=0", "train.checkpoint_every=1", "train.keep_checkpoints=5", "train.final_eval_episodes=0",
    "algo.minibatch_size=32", "algo.epochs=1", "log.tensorboard=false", "env.max_steps=5", "log.transcripts=1",
]


def _train(run: Path, iterations: int, resume: bool = False, *extra: str) -> None:
    sets = [*extra, f"train.iterations={iterations}", f"run_dir={run}"]
    config = load_config(run / "config.yaml", sets) if resume else load_config(None, [*TINY, *sets])
    with Trainer(config, resume=resume) as trainer:
        trainer.run()


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _comparable(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in _lines(run / "metrics.jsonl")]


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_a_branch_stands_at_its_checkpoint_and_replays_the_original_exactly(tmp_path):
    run = tmp_path / "run"
    _train(run, 2)
    _train(run, 3, True, "algo.lr=1e-5")  # resumed at 2 with a smaller step: config.yaml now says 1e-5
    (run / "wandb").mkdir()  # where W&B keeps its own run (log.wandb): the original's, not the branch's
    before = _files(run)
    branch = branch_run(run, 1, say=lambda _: None)
    assert branch == tmp_path / "run-at1" and _files(run) == before  # the original is untouched
    assert [p.name for p in (branch / "checkpoints").iterdir()] == ["iter_000001"]
    ckpt = "checkpoints/iter_000001"
    assert {k: v for k, v in _files(branch).items() if k.startswith(ckpt)} == {k: v for k, v in before.items() if k.startswith(ckpt)}
    # the config the original trained on after iteration 1: the later resume's changes undone
    config = load_config(branch / "config.yaml", [])
    assert (config.run_dir, config.train.iterations) == (str(branch), 2)
    assert "lr" not in config.algo.algo_options()  # absent before the resume set it: the algorithm's default
    assert [r["iteration"] for r in _lines(branch / "metrics.jsonl") if r["kind"] == "train"] == [1]
    assert {r["iteration"] for r in _lines(branch / "transcripts.jsonl")} == {1}
    assert [(r["iteration"], r["changed"], r["branched_from"]) for r in _lines(branch / "resumes.jsonl")] == [(1, {}, str(run))]
    assert not (branch / "final_eval.json").exists() and not (branch / "report").exists() and not (branch / "wandb").exists()
    # resumed unchanged: iteration 2 is the original's, line for line and weight for weight
    _train(branch, 2, resume=True)
    assert _comparable(branch) == _comparable(run)[:2]
    adapter = "coordinator/adapter/adapter_model.safetensors"
    assert (branch / "checkpoints/iter_000002" / adapter).read_bytes() == (run / "checkpoints/iter_000002" / adapter).read_bytes()
    assert [r["iteration"] for r in _lines(branch / "resumes.jsonl")] == [1, 1]  # the branch, then its resume
    # at 2 the change is the original's own (made there): the branch keeps it and replays iteration 3
    at2 = branch_run(run, 2, say=lambda _: None)
    assert load_config(at2 / "config.yaml", []).algo.algo_options()["lr"] == 1e-5
    assert [r["changed"].get("algo.lr") for r in _lines(at2 / "resumes.jsonl")] == [[None, 1e-5], None]
    _train(at2, 3, resume=True)
    assert _comparable(at2) == _comparable(run)
    assert (at2 / "checkpoints/iter_000003" / adapter).read_bytes() == (run / "checkpoints/iter_000003" / adapter).read_bytes()
    # another branch at 1, resumed with a smaller step, goes its own way from iteration 2 on
    other = branch_run(run, 1, tmp_path / "lower", say=lambda _: None)
    _train(other, 2, True, "algo.lr=1e-6")
    assert _comparable(other)[0] == _comparable(run)[0] and _comparable(other)[1] != _comparable(run)[1]
    rows = _lines(other / "resumes.jsonl")
    assert rows[-1]["changed"]["algo.lr"][1] == 1e-6 and rows[0]["branched_from"] == str(run)
    page = write_report(other).read_text()
    assert f"<tr><td>1</td><td>{rows[0]['time']}</td><td>branched from {run}</td></tr>" in page
    card = model_card({}, "base", load_config(other / "config.yaml", []).model_dump(mode="json"), None, rows)
    assert f"- branched from `{run}` at iteration 1\n" in card and "- resumed at iteration 1 with `algo.lr`" in card


def test_branch_refuses_what_it_cannot_do_and_leaves_nothing_behind(tmp_path, capsys):
    run = tmp_path / "run"
    _train(run, 3, False, "train.keep_checkpoints=2")
    with pytest.raises(TeamTRError, match=r"no checkpoint of iteration 1 \(kept: 2, 3\)"):
        branch_run(run, 1)
    (tmp_path / "taken").mkdir()
    with pytest.raises(TeamTRError, match="taken already exists; nothing was copied"):
        branch_run(run, 2, tmp_path / "taken")
    with pytest.raises(TeamTRError, match="lies inside"):
        branch_run(run, 2, run / "sub")
    with pytest.raises(TeamTRError, match="not a run directory"):
        branch_run(tmp_path / "taken", 2)
    damaged = run / "checkpoints" / "iter_000002" / "trainer.json"
    damaged.write_text("{not json")
    with pytest.raises(TeamTRError, match="iter_000002 is damaged"):
        branch_run(run, 2)
    # a failure after the copy began (a torn line inside transcripts.jsonl): nothing half-made is left
    transcripts = run / "transcripts.jsonl"
    good = transcripts.read_text()
    transcripts.write_text("{torn\n" + good)
    with pytest.raises(TeamTRError, match=r"transcripts\.jsonl"):
        branch_run(run, 3, tmp_path / "half")
    transcripts.write_text(good)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "taken"]  # no half-made branch, no .tmp-half
    assert main(["branch", str(run), "--at", "3"]) == 0
    out = capsys.readouterr().out
    assert f"teamtr train --resume {tmp_path / 'run-at3'}" in out and (tmp_path / "run-at3" / "checkpoints" / "iter_000003").is_dir()
