"""Trainer: PPO raises the advantage-weighted log-prob; checkpoints round-trip; kill and resume."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.rl import warmup_cosine
from teamtr.rl.losses import masked_log_softmax
from teamtr.train.checkpoint import latest_checkpoint, load_checkpoint
from teamtr.policy.coordinator import build_coordinator
from teamtr.train.trainer import Trainer

TINY = [
    "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=6", "rollout.parallel=6",
    "train.iterations=2", "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0",
    "algo.minibatch_size=32", "algo.epochs=2", "log.tensorboard=false", "env.max_steps=6",
]


def config(tmp_path: Path, *extra: str):
    return load_config(None, [*TINY, f"run_dir={tmp_path / 'run'}", *extra])


def objective(trainer: Trainer, rollout) -> float:
    handles = rollout.handles
    with torch.no_grad():
        scores, _ = trainer.coordinator.evaluate(handles)
    logp = masked_log_softmax(scores, rollout.mask)
    chosen = logp.gather(1, rollout.actions[:, None]).squeeze(1)
    return float((rollout.advantages * chosen).mean())


def test_ppo_update_raises_advantage_weighted_log_prob(tmp_path):
    trainer = Trainer(config(tmp_path, "algo.lr=0.003", "algo.warmup_updates=0", "algo.ent_coef_start=0",
                             "algo.ent_coef_end=0"))
    rollout, episodes, _ = trainer.collect()
    rollout.compute_advantages(0.99, 0.95, True)
    before = objective(trainer, rollout)
    metrics = trainer.algo.update(lambda mb: trainer.coordinator.evaluate(mb.handles), rollout)
    trainer.coordinator.weights_changed()
    after = objective(trainer, rollout)
    assert after > before + 1e-3, (before, after)
    assert metrics["policy/kl_old_new"] > 0 and metrics["optim/epochs_run"] >= 1
    assert len(episodes) == 6
    trainer.close()


def test_checkpoint_round_trip_restores_log_probs_and_optimizer(tmp_path):
    trainer = Trainer(config(tmp_path, "train.iterations=1", "algo.lr=0.003", "algo.warmup_updates=0"))
    trainer.run()
    states = [trainer.make_team().reset(s) for s in range(3)]
    want = trainer.coordinator.act(states, greedy=True)
    opt_state = trainer.algo.state_dict()
    trainer.close()
    fresh = Trainer(config(tmp_path, "train.iterations=1", "algo.lr=0.003", "algo.warmup_updates=0"), resume=True)
    got = fresh.coordinator.act(states, greedy=True)
    assert torch.equal(got.logp, want.logp) and torch.equal(got.values, want.values)
    assert fresh.iteration == 1
    flat_a = [v for v in _tensors(opt_state)]
    flat_b = [v for v in _tensors(fresh.algo.state_dict())]
    assert len(flat_a) == len(flat_b) > 0 and all(torch.equal(a, b) for a, b in zip(flat_a, flat_b))
    fresh.close()


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def _train_lines(run: Path) -> list[int]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [x["iteration"] for x in lines if x["kind"] == "train"]


def test_sigkill_mid_run_then_resume_has_every_line_once(tmp_path):
    run = tmp_path / "run"
    sets = [*TINY, "train.iterations=4", f"run_dir={run}"]
    cmd = [sys.executable, "-c", "import sys; from teamtr.cli import main; sys.exit(main(sys.argv[1:]))",
           "train", *sum((["--set", s] for s in sets), [])]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("{}\n")
    cmd[cmd.index("train") + 1 : cmd.index("train") + 1] = ["--config", str(cfg_file)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline:
        if (run / "metrics.jsonl").exists() and len(_train_lines(run)) >= 2:
            break
        if proc.poll() is not None:
            pytest.fail(proc.stderr.read().decode()[-2000:])
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert latest_checkpoint(run) is not None
    done = subprocess.run(cmd[:cmd.index("train") + 1] + ["--resume", str(run), "--set", "log.tensorboard=false"],
                          env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert _train_lines(run) == [1, 2, 3, 4]
    assert not list((run / "checkpoints").glob(".tmp-*"))


def test_bad_config_names_the_key(tmp_path):
    with pytest.raises(TeamTRError, match=r"algo.*clip_eps"):
        config(tmp_path, "algo.clip_eps=-1")
    with pytest.raises(TeamTRError, match=r"unknown config key 'rollout.episdoes'"):
        config(tmp_path, "rollout.episdoes=3")
    with pytest.raises(TeamTRError, match=r"model.train_layers"):
        config(tmp_path, "model.train_layers=some")
    with pytest.raises(TeamTRError, match="max_stepz"):
        Trainer(config(tmp_path, "env.max_stepz=3"))


def test_exponent_floats_parse_in_files_and_overrides(tmp_path):
    # PyYAML alone reads 5e-4 as a string (YAML 1.1), and validation would reject a learning rate.
    path = tmp_path / "c.yaml"
    path.write_text("algo: {lr: 5e-4, target_kl: 1E-2}\nenv: {name: escape-room, agents: 3}\n")
    cfg = load_config(path, ["algo.clip_eps=1e-1"])
    assert cfg.algo.lr == pytest.approx(5e-4) and cfg.algo.target_kl == pytest.approx(0.01)
    assert cfg.algo.clip_eps == pytest.approx(0.1)
    assert cfg.env.options()["agents"] == 3


def test_resume_restores_trainer_state(tmp_path):
    trainer = Trainer(config(tmp_path, "train.iterations=1"))
    trainer.run()
    seed, episode = trainer.seeds.next, trainer.episode_id
    trainer.close()
    ckpt = latest_checkpoint(tmp_path / "run")
    other = Trainer(config(tmp_path, "train.iterations=1"))
    state = load_checkpoint(ckpt, other.coordinator, other.algo)
    assert (state["train_seed"], state["episode_id"], state["iteration"]) == (seed, episode, 1)
    other.close()


def _cli_train(tmp_path: Path, *sets: str) -> int:
    """``teamtr train`` in-process on the tiny model, one iteration, into ``tmp_path/run``."""
    from teamtr.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("{}\n")
    sets = (*TINY, "train.iterations=1", *sets, f"run_dir={tmp_path / 'run'}")
    return main(["train", "--config", str(cfg), *sum((["--set", s] for s in sets), [])])


def test_cli_train_prints_the_final_table_and_report(tmp_path, capsys):
    sets = ["train.final_eval_episodes=3", "train.final_zero_shot_episodes=2", "env.max_steps=14"]
    assert _cli_train(tmp_path, *sets) == 0
    out = capsys.readouterr().out
    assert "(trained 3, zero-shot 2, random 3, oracle 3 episodes)" in out
    final = json.loads((tmp_path / "run" / "final_eval.json").read_text())
    assert final["episodes"] == {"trained": 3, "zero-shot": 2, "random": 3, "oracle": 3}
    assert final["rows"]["oracle"]["success"] == 1.0
    assert (tmp_path / "run" / "report" / "index.html").is_file()
    assert _cli_train(tmp_path, *sets) == 2  # run exists
    assert "already holds a run" in capsys.readouterr().err


def test_a_report_that_fails_leaves_the_run_complete(tmp_path, capsys, monkeypatch):
    """A report is made from the run's files after the run: its failure (a plotting library's, say) is said,
    with the command that retries it, and does not fail a finished run (nor stop a sweep after it)."""
    from teamtr.telemetry import report

    def broken(run_dir):
        raise RuntimeError("no usable font")

    monkeypatch.setattr(report, "write_report", broken)
    assert _cli_train(tmp_path, "train.final_eval_episodes=2", "train.final_zero_shot_episodes=0",
                      "train.final_baselines=[random]") == 0
    err = capsys.readouterr().err
    assert "report could not be made (RuntimeError: no usable font)" in err
    assert f"`teamtr report {tmp_path / 'run'}` tries again" in err
    assert (tmp_path / "run" / "final_eval.json").is_file() and not (tmp_path / "run" / "report").exists()


def test_curriculum_moves_on_by_success_or_iterations():
    from teamtr.config import CurriculumStage
    from teamtr.train.curriculum import Curriculum

    stages = [CurriculumStage(env={"agents": 2, "items": 2}, success=0.5, window=2),
              CurriculumStage(env={"items": 2}, max_iterations=3)]
    cur = Curriculum(stages, {"agents": 3, "items": 3})
    assert cur.options() == {"agents": 2, "items": 2}
    assert cur.describe() == "curriculum stage 1: agents=2, items=2"
    assert not cur.record(0.9)  # one iteration is not yet a window of 2
    assert not cur.record(0.0)  # mean of the last 2: 0.45 < 0.5
    assert not cur.record(0.6)  # 0.3
    assert cur.record(0.8)  # 0.7: on to stage 1
    assert cur.options() == {"agents": 3, "items": 2} and cur.state_dict() == {"stage": 1, "history": []}
    assert cur.describe() == "curriculum stage 2: items=2"  # what the stage sets, not the world it keeps
    assert not cur.record(0.0) and not cur.record(0.0)
    assert cur.record(0.0)  # max_iterations = 3, whatever the success
    assert cur.finished and cur.options() == {"agents": 3, "items": 3} and not cur.record(1.0)
    assert cur.describe() == ""
    other = Curriculum(stages, {"agents": 3, "items": 3})
    other.load_state_dict({"stage": 1, "history": [0.5]})
    assert other.options()["agents"] == 3 and other.history == [0.5]
    with pytest.raises(TeamTRError, match="curriculum stage 5"):
        other.load_state_dict({"stage": 5})


def test_curriculum_stage_in_metrics_transcripts_and_checkpoint(tmp_path):
    stages = "curriculum.stages=[{env: {agents: 2, items: 2}, max_iterations: 1}]"
    trainer = Trainer(config(tmp_path, stages, "env.agents=3", "env.items=3"))
    trainer.run()
    trainer.close()
    run = tmp_path / "run"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["curriculum/stage"] for x in lines if x["kind"] == "train"] == [0, 1]
    tasks = {json.loads(x)["iteration"]: json.loads(x)["task"] for x in (run / "transcripts.jsonl").read_text().splitlines()}
    assert "agent_C" not in tasks[1] and "agent_C" in tasks[2]
    state = load_checkpoint(latest_checkpoint(run), build_coordinator(config(tmp_path, stages)))
    assert state["curriculum"] == {"stage": 1, "history": []}
    resumed = Trainer(config(tmp_path, stages, "env.agents=3", "env.items=3", "train.iterations=3"), resume=True)
    assert resumed.curriculum.finished and resumed.make_team().world.agents == ["agent_A", "agent_B", "agent_C"]
    resumed.close()


@pytest.mark.parametrize("schedule", ["run", "stage"])
def test_curriculum_schedule_stage_restarts_the_lr_and_entropy_schedules(tmp_path, schedule):
    sets = ["curriculum.stages=[{env: {agents: 2, items: 2}, max_iterations: 2}]", f"curriculum.schedule={schedule}",
            "train.iterations=5", "train.keep_checkpoints=5", "algo.warmup_updates=0", "algo.lr=0.001",
            "algo.ent_coef_start=0.1", "algo.ent_coef_end=0.0"]
    with Trainer(config(tmp_path, *sets)) as trainer:
        trainer.run()
    run = tmp_path / "run"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["kind"] == "train"]
    assert [x["curriculum/stage"] for x in train] == [0, 0, 1, 1, 1]
    # stage: cosine over the stage's 2 iterations, then again over the 3 left; run: one cosine over 5
    spans = [(0, 2), (1, 2), (0, 3), (1, 3), (2, 3)] if schedule == "stage" else [(i, 5) for i in range(5)]
    assert [x["optim/lr"] for x in train] == pytest.approx([0.001 * warmup_cosine(i, 0, n) for i, n in spans])
    assert [x["optim/ent_coef"] for x in train] == pytest.approx([0.1 * (1 - i / n) for i, n in spans])
    for late in ("iter_000004", "iter_000005"):  # resume inside the last stage: its schedule comes back
        shutil.rmtree(run / "checkpoints" / late)
    with Trainer(config(tmp_path, *sets), resume=True) as resumed:
        resumed.run()
    again = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["optim/lr"] for x in again if x["kind"] == "train"] == [x["optim/lr"] for x in train]


def test_a_stage_lr_sets_the_policy_lr_in_that_stage_and_algo_lr_after_it(tmp_path):
    sets = ["curriculum.stages=[{env: {agents: 2, items: 2}, max_iterations: 2, lr: 0.004}]",
            "curriculum.schedule=stage", "train.iterations=4", "train.keep_checkpoints=4", "algo.warmup_updates=0",
            "algo.lr=0.001", "algo.min_lr_ratio=1.0", "algo.value_lr=0.0005"]
    with Trainer(config(tmp_path, *sets)) as trainer:
        algo = trainer.algo
        value = [g for g in algo.optimizer.param_groups if not g["policy"]]
        assert algo.stage_lr_scale == pytest.approx(4.0) and len(value) == 1
        trainer.run()
        policy = [g for g in algo.optimizer.param_groups if g["policy"]]
        scales = [g["lr_scale"] for g in trainer.coordinator.policy_param_groups()]
        # after the stage: algo.lr again on the policy, and the value head never scaled
        assert [g["lr"] for g in policy] == pytest.approx([0.001 * s for s in scales])
        assert value[0]["lr"] == pytest.approx(0.0005) and algo.stage_lr_scale == 1.0
    run = tmp_path / "run"
    train = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in train if x["kind"] == "train"]
    assert [x["curriculum/stage"] for x in train] == [0, 0, 1, 1]
    assert [x["optim/lr"] for x in train] == pytest.approx([0.004, 0.004, 0.001, 0.001])
    for late in ("iter_000002", "iter_000003", "iter_000004"):  # resume inside the stage: its LR comes back
        shutil.rmtree(run / "checkpoints" / late)
    with Trainer(config(tmp_path, *sets), resume=True) as resumed:
        assert resumed.curriculum.stage == 0 and resumed.algo.stage_lr_scale == pytest.approx(4.0)
        resumed.run()
    again = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["optim/lr"] for x in again if x["kind"] == "train"] == pytest.approx([0.004, 0.004, 0.001, 0.001])
    with pytest.raises(TeamTRError, match=r"curriculum.stages\[0\].lr.*trpo.*max_kl"):
        config(tmp_path, *sets, "algo.name=trpo")


def test_curriculum_config_errors_name_the_stage(tmp_path):
    with pytest.raises(TeamTRError, match=r"curriculum.*stages.*0.*success.*max_iterations"):
        config(tmp_path, "curriculum.stages=[{env: {agents: 2}}]")
    with pytest.raises(TeamTRError, match=r"curriculum.stages\[0\].env: .*agentz"):
        Trainer(config(tmp_path, "curriculum.stages=[{env: {agentz: 2}, max_iterations: 1}]"))


def test_resume_with_a_new_lr_really_changes_the_lr(tmp_path):
    with Trainer(config(tmp_path, "train.iterations=1", "algo.lr=0.003", "algo.warmup_updates=0")) as first:
        first.run()
    with Trainer(config(tmp_path, "train.iterations=2", "algo.lr=0.001", "algo.warmup_updates=0"),
                 resume=True) as resumed:
        groups = resumed.algo.optimizer.param_groups
        scales = [g["lr_scale"] for g in resumed.coordinator.policy_param_groups()]
        assert [g["base_lr"] for g in groups[: len(scales)]] == pytest.approx([0.001 * s for s in scales])
        assert len(resumed.algo.optimizer.state) > 0  # the moments were restored, not rebuilt
        resumed.run()
        line = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
        top = groups[len(scales) - 1]  # lr_scale 1: the LR the metrics report
        c = resumed.algo_config
        want = 0.001 * warmup_cosine(1, c.warmup_updates, c.total_updates, c.min_lr_ratio)
        assert line["iteration"] == 2 and top["lr"] == pytest.approx(want) == line["optim/lr"]
    # config.yaml now says 0.001: resumes.jsonl keeps what it was before, and from which iteration it changed
    rows = [json.loads(x) for x in (tmp_path / "run" / "resumes.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["changed"]) for r in rows] == [(1, {"algo.lr": [0.003, 0.001], "train.iterations": [1, 2]})]
    with Trainer(config(tmp_path, "train.iterations=2", "algo.lr=0.001", "algo.warmup_updates=0"), resume=True):
        pass  # a resume that changes nothing is recorded too, after a torn line is dropped
    path = tmp_path / "run" / "resumes.jsonl"
    path.write_text(path.read_text() + '{"iteration": 9, "chan')
    with Trainer(config(tmp_path, "train.iterations=2", "algo.lr=0.001", "algo.warmup_updates=0"), resume=True):
        pass
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(r["iteration"], r["changed"]) for r in rows] == [(1, {"algo.lr": [0.003, 0.001], "train.iterations": [1, 2]}),
                                                             (2, {}), (2, {})]


def test_resume_refuses_settings_that_cannot_change(tmp_path):
    from teamtr.config import dump_config
    from teamtr.train.resume import check_resume_config

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(config(tmp_path)))
    ok = check_resume_config(run, config(tmp_path, "train.iterations=9", "algo.lr=0.01", "log.transcripts=1"))
    assert ok == {"algo.lr": (None, 0.01), "log.transcripts": (2, 1), "train.iterations": (2, 9)}  # None: the default
    assert list(ok) == ["algo.lr", "log.transcripts", "train.iterations"]
    with pytest.raises(TeamTRError, match=r"env.max_steps: 6 -> 9.*seed: 0 -> 3.*start a new run"):
        check_resume_config(run, config(tmp_path, "env.max_steps=9", "seed=3", "train.iterations=9"))
    with pytest.raises(TeamTRError, match=r"model.backbone"):
        Trainer(config(tmp_path, "model.backbone=tiny-random-4"), resume=True)


@pytest.mark.parametrize("seed", [10, 9999])
def test_training_seeds_never_reach_the_heldout_range(tmp_path, seed):
    from teamtr.train.collect import TrainSeeds, check_train_seeds

    offset = 1_000_000
    seeds = TrainSeeds(seed, offset)
    starts = [seeds.take(997) for _ in range(2000)]  # ~2M seeds: wraps around at least once
    assert all(0 <= s and s + 997 <= offset for s in starts) and min(starts) == 0
    with pytest.raises(TeamTRError, match="held-out range"):
        check_train_seeds(offset - 3, 4, offset)
    if seed == 10:
        with Trainer(config(tmp_path, f"seed={seed}")) as trainer:
            _, _, transcripts = trainer.collect()
        assert all(t["seed"] < trainer.config.train.eval_seed_offset for t in transcripts)
        assert [t["seed"] for t in transcripts] == list(range(10 * 100_003 % offset, 10 * 100_003 % offset + 6))


def test_a_run_whose_every_step_is_skipped_stops_with_a_message(tmp_path, monkeypatch):
    trainer = Trainer(config(tmp_path, "train.iterations=6", "train.checkpoint_every=10"))
    real = trainer.algo.update

    def skipping(evaluate, rollout):
        metrics = real(evaluate, rollout)
        return {**metrics, "optim/skipped_steps": 4.0, "optim/epochs_run": 0.0}

    monkeypatch.setattr(trainer.algo, "update", skipping)
    with pytest.raises(TeamTRError, match=r"iterations 1-3: every update step was skipped.*reward weights"):
        trainer.run()
    trainer.close()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines if x["kind"] == "train"] == [1, 2, 3]


def test_trpo_on_a_real_coordinator_stays_in_the_trust_region(tmp_path):
    trainer = Trainer(config(tmp_path, "algo.name=trpo", "algo.trpo_delta=0.01", "algo.kl_coef=0"))
    rollout, _, _ = trainer.collect()
    rollout.compute_advantages(0.99, 0.95, True)
    before = {k: v.clone() for k, v in trainer.coordinator.adapter_state().items()}
    metrics = trainer.update(rollout)
    assert metrics["trpo/accepted"] == 1.0 and metrics["trpo/step_size"] > 0
    assert any(not torch.equal(v, trainer.coordinator.adapter_state()[k]) for k, v in before.items())
    assert not trainer.coordinator._store  # after_update dropped the decisions the update used
    # KL(old || new) over every decision, measured by the algorithm's line search: within delta.
    assert 0 < metrics["policy/kl_old_new"] <= 0.01
    trainer.close()


def test_algo_ref_bc_uses_the_cloned_adapter_as_reference(tmp_path):
    trainer = Trainer(config(tmp_path, "bc.enabled=true", "bc.demos=24", "bc.epochs=1", "bc.batch_size=8",
                             "algo.ref=bc", "algo.kl_coef=0.1"))
    trainer.warm_up()
    trainer._start_rl()
    assert trainer.bc_state is not None
    rollout, _, _ = trainer.collect()  # iteration 1: the policy is still the BC snapshot
    m = rollout.mask
    assert torch.equal(rollout.ref_logp[m], rollout.logp[m])
    team_states = [trainer.make_team().reset(s) for s in range(3)]
    policy = trainer.coordinator.act(team_states, greedy=True).logp
    with trainer.coordinator.disable_adapter():
        base = trainer.coordinator.act(team_states, greedy=True).logp
    mask = torch.isfinite(policy)
    assert (policy - base)[mask].abs().max() > 1e-4  # BC moved the policy away from the base model
    assert torch.equal(trainer._ref_logp(team_states, policy)[mask], policy[mask])
    rollout.compute_advantages(0.99, 0.95, True)
    trainer.update(rollout)
    after = trainer.coordinator.act(team_states, greedy=True).logp
    ref = trainer._ref_logp(team_states, after)
    assert torch.equal(ref[mask], policy[mask]) and not torch.equal(after[mask], policy[mask])
    trainer.close()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from teamtr.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def _sets(*sets: str) -> list[str]:
    return sum((["--set", s] for s in sets), [])


def _comparable(run: Path) -> list[dict]:
    """The train and eval lines without wall-clock fields."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in rows]


def test_sigint_prints_the_resume_command_and_the_resumed_run_matches(tmp_path):
    """Ctrl-C: exit 130 with the checkpoint and the exact --resume command; resuming ends where an
    uninterrupted run of the same length ends, line for line and weight for weight."""
    run, ref = tmp_path / "run", tmp_path / "ref"
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("{}\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    base = [*TINY, "algo.total_updates=8", "train.eval_every=2", "train.eval_episodes=2"]
    proc = subprocess.Popen(_cli("train", "--config", str(cfg_file), *_sets(*base, "train.iterations=200",
                                                                              f"run_dir={run}")),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            # a shell's background job starts with SIGINT ignored, and so would the child
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while latest_checkpoint(run) is None or latest_checkpoint(run).name < "iter_000002":
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(proc.stderr.read().decode()[-2000:])
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    text = out.decode() + err.decode()
    assert proc.returncode == 130, text[-2000:]
    last = latest_checkpoint(run)
    assert f"teamtr train --resume {run}" in text and str(last) in text and "teamtr: interrupted." in text
    assert not list((run / "checkpoints").glob(".tmp-*"))
    n = int(last.name.removeprefix("iter_")) + 2
    done = subprocess.run(_cli("train", "--resume", str(run), *_sets(f"train.iterations={n}")), env=env,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    whole = subprocess.run(_cli("train", "--config", str(cfg_file), *_sets(*base, f"train.iterations={n}",
                                                                           f"run_dir={ref}")),
                           env=env, capture_output=True, timeout=300)
    assert whole.returncode == 0, whole.stderr.decode()[-2000:]
    assert [r["iteration"] for r in _comparable(run) if r["kind"] == "train"] == list(range(1, n + 1))
    # one evaluation before the first update (iteration 0), not repeated by the resumed process
    assert [r["iteration"] for r in _comparable(run) if r["kind"] == "eval"] == list(range(0, n + 1, 2))
    assert _comparable(run) == _comparable(ref)
    adapter = Path("coordinator/adapter/adapter_model.safetensors")
    final = f"checkpoints/iter_{n:06d}"
    assert (run / final / adapter).read_bytes() == (ref / final / adapter).read_bytes()


@pytest.mark.parametrize("setting", ["model.rl_layers=6", "model.train_layers=3"])
def test_too_many_layers_fail_before_the_model_loads_and_leave_no_run(tmp_path, monkeypatch, setting):
    import teamtr.policy.coordinator as coordinator_mod

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the layer check")

    monkeypatch.setattr(coordinator_mod, "load_backbone", no_load)
    key = setting.split("=")[0]
    with pytest.raises(TeamTRError, match=rf"{key} \d must be 'all' or an integer from 1 to 2"):
        Trainer(config(tmp_path, "bc.enabled=true", setting))
    assert not (tmp_path / "run").exists()


def test_a_setup_that_fails_takes_back_its_run_directory(tmp_path, monkeypatch, capsys):
    import teamtr.train.trainer as trainer_mod
    from teamtr.cli import main

    class BrokenLogger:
        def __init__(self, *args, **kwargs):
            raise TeamTRError("W&B refused the login (simulated).")

    cfg = tmp_path / "c.yaml"
    cfg.write_text("{}\n")
    argv = ["train", "--config", str(cfg), *_sets(*TINY, "train.iterations=1", f"run_dir={tmp_path / 'run'}")]
    monkeypatch.setattr(trainer_mod, "RunLogger", BrokenLogger)
    assert main(argv) == 2 and "simulated" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").write_text("")  # an empty directory the CLI accepts: its lock stays
    assert main(argv) == 2
    assert [p.name for p in (tmp_path / "run").iterdir()] == [".lock"]
    monkeypatch.undo()
    assert main(argv) == 0  # the same command now runs: nothing blocks the retry
    assert latest_checkpoint(tmp_path / "run").name == "iter_000001"


def test_model_init_starts_from_another_runs_adapter_as_the_warm_start(tmp_path):
    """A BC-only run's adapter as the start of RL runs (one warm-up shared by many algorithms): the
    new run acts exactly as that adapter, keeps it as bc/ for algo.ref=bc, and resumes with it."""
    source = Trainer(load_config(None, [*TINY, f"run_dir={tmp_path / 'bc_run'}", "bc.enabled=true",
                                        "bc.demos=24", "bc.epochs=1", "bc.batch_size=8", "train.iterations=0"]))
    source.warm_up()
    source.close()
    states = [source.make_team().reset(s) for s in range(3)]
    cloned = source.coordinator.act(states, greedy=True).logp
    sets = [f"model.init={tmp_path / 'bc_run' / 'bc'}", "algo.ref=bc", "algo.kl_coef=0.1"]
    trainer = Trainer(config(tmp_path, *sets))
    assert torch.equal(trainer.coordinator.act(states, greedy=True).logp, cloned)
    assert trainer.bc_done and (tmp_path / "run" / "bc" / "adapter").is_dir()
    rollout, _, _ = trainer.collect()
    assert torch.equal(rollout.ref_logp[rollout.mask], rollout.logp[rollout.mask])  # KL against the init
    trainer.run()
    from teamtr.cli import final_table

    rows = final_table(trainer, config(tmp_path, *sets, "train.final_eval_episodes=1", "train.final_zero_shot_episodes=0"))
    assert list(rows)[:2] == ["trained", "bc"]  # the warm start alone beside it + RL
    trainer.close()
    resumed = Trainer(config(tmp_path, *sets, "train.iterations=3"), resume=True)
    assert resumed.iteration == 2 and resumed.bc_state is not None
    assert all(torch.equal(resumed.bc_state[k], v) for k, v in trainer.bc_state.items())
    resumed.close()
    with pytest.raises(TeamTRError, match="model.init=.*nowhere.*no checkpoint there"):
        Trainer(load_config(None, [*TINY, f"run_dir={tmp_path / 'r2'}", f"model.init={tmp_path / 'nowhere'}"]))


def test_bc_cosine_schedule_warms_up_then_decays_to_zero_and_constant_keeps_the_lr(tmp_path):
    """bc.schedule=cosine: step 1 runs at lr/warmup, the peak is bc.lr, the last step is near 0, and the
    steps follow warmup_cosine exactly; constant keeps bc.lr on every step."""
    seen: dict[str, list[float]] = {}
    for schedule in ("cosine", "constant"):
        trainer = Trainer(config(tmp_path / schedule, "bc.enabled=true", "bc.demos=80", "bc.epochs=2",
                                 "bc.batch_size=8", "bc.lr=0.002", f"bc.schedule={schedule}"))
        lrs: list[float] = []
        log = trainer._log
        trainer._log = lambda kind, step, m: (lrs.append(m["bc/lr"]) if kind == "bc" else None, log(kind, step, m))
        trainer.warm_up()
        trainer.close()
        seen[schedule] = lrs
    total = 20  # 2 epochs x 80 demos / 8
    assert len(seen["cosine"]) == len(seen["constant"]) == total
    assert seen["constant"] == [0.002] * total
    expected = [0.002 * warmup_cosine(s, 2, total) for s in range(total)]
    assert seen["cosine"] == pytest.approx(expected, rel=1e-12)
    assert seen["cosine"][0] == pytest.approx(0.001) and max(seen["cosine"]) == pytest.approx(0.002)
    assert seen["cosine"][-1] < 0.002 * 0.01


def test_bc_schedule_rejects_an_unknown_name(tmp_path):
    with pytest.raises(TeamTRError, match="'bc.schedule' = 'linear': Input should be 'constant' or 'cosine'"):
        config(tmp_path, "bc.schedule=linear")
    from teamtr.train.bc import behaviour_clone

    with pytest.raises(TeamTRError, match="bc.schedule: 'linear' is not a schedule; use constant or cosine"):
        behaviour_clone(None, [], epochs=1, batch_size=1, lr=1.0, schedule="linear")  # checked before any work


def test_final_table_has_a_bc_row_scored_with_the_cloned_snapshot(tmp_path):
    """After BC then RL the end-of-run table holds trained, bc, zero-shot and the baselines; the bc row's
    episodes are those of a coordinator loaded from RUN/bc (probabilities to 1e-5), not the trained one's."""
    import json

    from teamtr.cli import final_table
    from teamtr.eval.evaluate import run_episodes
    from teamtr.eval.policies import CoordinatorPolicy
    from teamtr.policy.backbone import load_backbone
    from teamtr.policy.coordinator import Coordinator

    cfg = config(tmp_path, "bc.enabled=true", "bc.demos=16", "bc.epochs=1", "bc.batch_size=8", "bc.lr=0.05",
                 "train.iterations=1", "algo.lr=0.05", "train.final_eval_episodes=2", "train.final_zero_shot_episodes=1",
                 "team.history_len=1")
    with Trainer(cfg) as trainer:
        trainer.run()
        rows = final_table(trainer, cfg)
    assert list(rows) == ["trained", "bc", "zero-shot", "random", "oracle"]
    counts = json.loads((tmp_path / "run" / "final_eval.json").read_text())["episodes"]
    assert counts["bc"] == counts["trained"] == 2  # train.final_bc_episodes unset: as many as the trained row
    evals = [json.loads(x) for x in (tmp_path / "run" / "eval_transcripts.jsonl").read_text().splitlines()]
    got = [p for e in evals if e["policy"] == "bc" for s in e["steps"] for p in s["probs"]]
    trained = [p for e in evals if e["policy"] == "trained" for s in e["steps"] for p in s["probs"]]
    loaded = Coordinator(load_backbone("tiny-random", device="cpu"))
    loaded.load(tmp_path / "run" / "bc")
    want: list = []
    off = cfg.train.eval_seed_offset
    run_episodes("escape-room", cfg.env.options(), CoordinatorPolicy(loaded), [off, off + 1], history_len=1,
                 transcripts=want)
    want_probs = [p for e in want for s in e["steps"] for p in s["probs"]]
    assert got == pytest.approx(want_probs, abs=1e-5)
    assert max(abs(a - b) for a, b in zip(got, trained)) > 1e-4  # RL moved the policy off the snapshot


def test_final_bc_episodes_sizes_or_skips_the_bc_row(tmp_path):
    """train.final_bc_episodes: 0 leaves the bc row out (runs sharing one warm start evaluate it once);
    a number caps its episodes like the zero-shot row's; final_eval.json records the counts."""
    import json

    from teamtr.cli import final_table

    for n, want in ((0, ["trained", "zero-shot", "random", "oracle"]), (1, ["trained", "bc", "zero-shot", "random", "oracle"])):
        run = tmp_path / f"n{n}"
        cfg = config(run, "bc.enabled=true", "bc.demos=8", "bc.epochs=1", "bc.batch_size=8", "train.iterations=1",
                     "train.final_eval_episodes=2", "train.final_zero_shot_episodes=1", f"train.final_bc_episodes={n}")
        with Trainer(cfg) as trainer:
            trainer.run()
            rows = final_table(trainer, cfg)
        assert list(rows) == want
        counts = json.loads((run / "run" / "final_eval.json").read_text())["episodes"]
        assert counts["bc"] == n and counts["trained"] == 2 and counts["zero-shot"] == 1
        played = [json.loads(x)["policy"] for x in (run / "run" / "eval_transcripts.jsonl").read_text().splitlines()]
        assert played.count("bc") == n and played.count("trained") == 2  # episodes actually played
