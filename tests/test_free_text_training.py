"""Free-text mode in training: token-level PPO over the whole vocabulary, the trainer and its final
table in whole-team and free-text modes, a curriculum that switches modes, and algo.ref=bc there."""

import json
import math

import pytest
import torch

from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator
from teamtr.policy.free_text import score_texts
from teamtr.rl import AlgoConfig, Rollout, make_algorithm
from teamtr.team import FreeText, Team
from teamtr.train.free_text import FreeTextActor
from teamtr.train.whole_team import token_update
from teamtr.train.trainer import Trainer

TINY = ["model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=2", "rollout.parallel=2",
        "train.iterations=1", "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0",
        "algo.minibatch_size=8", "algo.epochs=2", "log.tensorboard=false", "env.max_steps=3", "env.agents=2",
        "env.items=2", "policy.max_new_tokens=6", "algo.kl_coef=0.05", "algo.warmup_updates=0"]


def config(tmp_path, *extra):
    return load_config(None, [*TINY, f"run_dir={tmp_path / 'run'}", *extra])


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_free_text_ppo_moves_a_rewarded_text_up():
    torch.manual_seed(0)
    c = Coordinator(load_backbone("tiny-random", device="cpu"))
    states = [Team(make("escape-room", agents=2, items=2)).reset(s) for s in range(4)]
    actor = FreeTextActor(c, reference=c.disable_adapter, max_new_tokens=4)
    choices, values, handles = actor.act(states, torch.Generator().manual_seed(0))
    assert all(isinstance(x, FreeText) and x.lines is None for x in choices)  # random weights write gibberish
    rollout = Rollout()
    for k, h in enumerate(handles):  # one-decision episodes; only the first text is rewarded
        actor.record(rollout, h, float(values[k]), 1.0 if k == 0 else 0.0, {"terminated": True, "truncated": False},
                     k, 0.0, k)
    rollout.compute_advantages(0.99, 0.95, True)
    algo = make_algorithm("ppo", c.policy_param_groups(), c.value_parameters(),
                          AlgoConfig(lr=5e-3, warmup_updates=0, epochs=2, minibatch_size=8, kl_coef=0.05,
                                     ent_coef_start=0.0, ent_coef_end=0.0, early_stop_factor=None))
    items = actor.store[:]

    def total():
        with torch.no_grad():
            return score_texts(c.backbone.model, items[0].prefix, [d.dynamic for d in items],
                               [d.tokens for d in items]).total

    before = total()
    assert torch.allclose(before, torch.stack([d.logp.sum() for d in items]), atol=1e-4)  # acting == scoring
    metrics = token_update(algo, actor, rollout)
    after = total()
    assert actor.store == []
    assert float(after[0] - before[0]) > 0.5  # the rewarded text is likelier...
    assert float((after[1:] - before[1:]).max()) < 0.0  # ...and every other one less likely
    assert metrics["optim/epochs_run"] == 2 and metrics["policy/kl_old_new"] > 0
    assert metrics["policy/kl_ref_new"] > 0 and metrics["policy/entropy"] > 5  # over 49k tokens: large
    for key in ("policy/loss", "value/loss", "policy/clip_frac"):
        assert math.isfinite(metrics[key]), key


def test_trainer_runs_free_text_and_its_final_table_writes_text(tmp_path):
    from teamtr.cli import final_table

    cfg = config(tmp_path, "team.directives=free_text", "train.final_eval_episodes=2",
                 "train.final_zero_shot_episodes=1")
    with Trainer(cfg) as trainer:
        trainer.run()
        rows = final_table(trainer, cfg)
    assert set(rows) == {"trained", "zero-shot", "random", "oracle"} and rows["oracle"]["success"] == 0.0
    line = next(x for x in _lines(tmp_path / "run" / "metrics.jsonl") if x["kind"] == "train")
    assert line["perf/decisions"] == 6  # 2 episodes x 3 decisions (nobody escapes in 3 ticks)
    assert 0 < line["perf/collect_s"] and 0 < line["perf/update_s"]  # the two phases, timed apart
    assert line["perf/collect_s"] + line["perf/update_s"] <= line["perf/iteration_s"]
    assert line["episode/invalid_rate"] == 1.0  # random weights: every text unparseable, and counted
    assert math.isfinite(line["policy/kl_ref_new"]) and line["policy/entropy"] > 5
    step = _lines(tmp_path / "run" / "transcripts.jsonl")[0]["steps"][0]
    assert step["choice"] == -1 and isinstance(step["text"], str) and step["lines"] is None
    assert step["terms"]["invalid"] == -0.5
    evals = _lines(tmp_path / "run" / "eval_transcripts.jsonl")
    trained = [e for e in evals if e["policy"] == "trained"]
    assert len(trained) == 2 and all("text" in s for e in trained for s in e["steps"])


def test_final_table_and_eval_use_the_whole_team_policy(tmp_path, capsys):
    from teamtr import cli
    from teamtr.eval.policies import MergedPolicy

    cfg = config(tmp_path, "team.directives=whole_team", "train.final_eval_episodes=2",
                 "train.final_zero_shot_episodes=1")
    with Trainer(cfg) as trainer:
        trainer.run()
        cli.final_table(trainer, cfg)
    evals = _lines(tmp_path / "run" / "eval_transcripts.jsonl")
    for e in evals:
        if e["policy"] in ("trained", "zero-shot"):  # whole-team lines, not a single candidate
            assert all(s["choice"] == -1 and isinstance(s["lines"], list) for s in e["steps"])
            assert any(len(s["lines"]) > 1 for s in e["steps"]), e["policy"]  # several agents at once
    policy = cli.build_policies(["trained"], cfg, cli.resolve_checkpoint(str(tmp_path / "run"))[0], 0)["trained"]
    assert isinstance(policy, MergedPolicy) and policy.directives == "whole_team"
    assert cli.main(["eval", "--checkpoint", str(tmp_path / "run"), "--episodes", "2", "--policy", "trained",
                     "zero-shot"]) == 0
    assert "trained" in capsys.readouterr().out


def test_curriculum_grows_the_directives_and_resumes_exactly(tmp_path):
    stages = ("curriculum.stages=[{team: {directives: single}, max_iterations: 1}, "
              "{team: {directives: whole_team}, max_iterations: 1}]")
    sets = [stages, "team.directives=free_text", "train.iterations=3", "algo.total_updates=3"]
    with Trainer(config(tmp_path, *sets)) as trainer:
        assert set(trainer.actors) == {"whole_team", "free_text"}
        trainer.run()
    run = tmp_path / "run"
    lines = [x for x in _lines(run / "metrics.jsonl") if x["kind"] == "train"]
    assert [x["curriculum/stage"] for x in lines] == [0, 1, 2]
    steps = {t["iteration"]: t["steps"][0] for t in _lines(run / "transcripts.jsonl")}
    assert steps[1]["choice"] >= 0 and "lines" not in steps[1]  # single: one candidate
    assert steps[2]["choice"] == -1 and "text" not in steps[2]  # whole-team lines
    assert "text" in steps[3]  # free text

    # killed after iteration 2 (inside the whole-team stage's successor), resumed: the same run
    other = tmp_path / "other"
    with Trainer(load_config(None, [*TINY, *sets, f"run_dir={other}", "train.iterations=2"])) as t:
        t.run()
    with Trainer(load_config(None, [*TINY, *sets, f"run_dir={other}"]), resume=True) as t:
        assert t.curriculum.stage == 2 and t.curriculum.directives() == "free_text"
        t.run()

    def comparable(path):
        return [{k: v for k, v in x.items() if k != "time" and not k.startswith("perf/")} for x in _lines(path)]

    assert comparable(other / "metrics.jsonl") == comparable(run / "metrics.jsonl")
    assert _lines(other / "transcripts.jsonl") == _lines(run / "transcripts.jsonl")


def test_ref_bc_in_whole_team_mode_is_the_cloned_adapter(tmp_path):
    trainer = Trainer(config(tmp_path, "team.directives=whole_team", "bc.enabled=true", "bc.demos=16",
                             "bc.epochs=1", "bc.batch_size=8", "algo.ref=bc", "algo.kl_coef=0.1"))
    trainer.warm_up()
    trainer._start_rl()
    assert trainer.bc_state is not None
    trainer.collect()  # iteration 1: the policy is still the BC snapshot, so the reference is the policy
    store = trainer.collector.actor.store
    assert all(torch.allclose(d.ref_branch[d.valid], d.branch[d.valid], atol=1e-5) for d in store)
    from teamtr.policy.whole_team import dense, score_whole_team

    d = store[0]
    with torch.no_grad(), trainer.coordinator.disable_adapter():
        base, _ = score_whole_team(trainer.coordinator, [(d.prefix, d.decision)], [d.tokens])
    base_branch = dense(base)[0][0]
    assert (base_branch[d.valid] - d.branch[d.valid]).abs().max() > 1e-4  # the base model is another policy
    trainer.close()


def test_ref_bc_in_whole_team_mode_from_a_warm_start_is_that_adapter(tmp_path):
    cloner = Trainer(config(tmp_path / "a", "bc.enabled=true", "bc.demos=16", "bc.epochs=1", "bc.batch_size=8"))
    cloner.warm_up()
    init = cloner.run_dir / "bc"
    cloner.close()
    trainer = Trainer(config(tmp_path / "b", "team.directives=whole_team", f"model.init={init}", "algo.ref=bc",
                             "algo.kl_coef=0.1"))
    trainer.warm_up()
    trainer._start_rl()
    assert trainer.bc_state is not None
    trainer.collect()  # iteration 1: the policy is the warm start, so the reference is the policy
    store = trainer.collector.actor.store
    assert all(torch.allclose(d.ref_branch[d.valid], d.branch[d.valid], atol=1e-5) for d in store)
    with torch.no_grad(), trainer.coordinator.disable_adapter():  # and not the base model
        from teamtr.policy.whole_team import dense, score_whole_team

        d = store[0]
        base, _ = score_whole_team(trainer.coordinator, [(d.prefix, d.decision)], [d.tokens])
    assert (dense(base)[0][0][d.valid] - d.branch[d.valid]).abs().max() > 1e-4
    trainer.close()


def test_directive_mode_config_errors(tmp_path):
    with pytest.raises(TeamTRError, match=r"team.directives=free_text.*token-level PPO.*algo.name=ppo"):
        config(tmp_path, "team.directives=free_text", "algo.name=trpo")
    with pytest.raises(TeamTRError, match=r"team.directives=whole_team.*algo.name='pg'"):
        config(tmp_path, "curriculum.stages=[{team: {directives: whole_team}, max_iterations: 1}]", "algo.name=pg")
    with pytest.raises(TeamTRError, match=r"algo.ref=bc with team.directives=whole_team.*bc.enabled=true; model.init"):
        config(tmp_path, "team.directives=whole_team", "algo.ref=bc")
    with pytest.raises(TeamTRError, match=r"curriculum.stages.0.team.directives.*'free'"):
        config(tmp_path, "curriculum.stages=[{team: {directives: free}, max_iterations: 1}]")
    with pytest.raises(TeamTRError, match=r"unknown config key 'curriculum.stages.0.team.agents'"):
        config(tmp_path, "curriculum.stages=[{team: {agents: {}}, max_iterations: 1}]")
    with pytest.raises(TeamTRError, match=r"team.directives=single"):
        Trainer(config(tmp_path, "team.directives=free_text", "rollout.backend=ray"))
