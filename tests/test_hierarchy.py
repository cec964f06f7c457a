"""Hierarchy (team.hierarchy): world goals, when the strategic level decides, the goal in the tactical
prompt, gradients kept per level, joint/alternate updates, evaluation, resume and errors."""

import json
from pathlib import Path

import pytest
import torch

from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.eval import run_episodes
from teamtr.eval.policies import HierarchicalPolicy, build_policies
from teamtr.hierarchy import STRATEGIC_ROLE, GoalSchedule, goal_state
from teamtr.policy.coordinator import build_coordinator
from teamtr.policy.levels import adapter_of, use_level
from teamtr.policy.prompts import user_text
from teamtr.rl.losses import masked_log_softmax
from teamtr.team import Team
from teamtr.train.checkpoint import validate_checkpoint
from teamtr.train.hierarchy import levels_trained
from teamtr.train import bc as bc_mod
from teamtr.train.trainer import Trainer

BASE = ["model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=2", "rollout.parallel=2",
        "train.iterations=2", "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0",
        "algo.minibatch_size=32", "algo.epochs=1", "algo.warmup_updates=0", "algo.lr=0.003",
        "log.tensorboard=false", "team.hierarchy.enabled=true", "team.hierarchy.every=2"]
TINY = [*BASE, "env.name=software-team", "env.deadline=6"]


def config(tmp_path: Path, *extra: str, run: str = "run"):
    return load_config(None, [*TINY, f"run_dir={tmp_path / run}", *extra])


def oracle_episode(schedule: GoalSchedule, **options) -> list[tuple[int, str]]:
    """(tick, goal task) of every strategic decision of an oracle-played software-team episode, the
    strategic level playing the world's expert goal."""
    team = Team(make("software-team", **options))
    team.reset(0)
    decided = []
    while not team.finished:
        if schedule.due(team):
            g = goal_state(team)
            team.set_goal(g.candidates[g.expert])
            decided.append((team.ticks, g.candidates[g.expert].task))
        team.step(team.state.expert)
    return decided


def test_software_team_goals_are_its_phases_in_order_and_a_bug_reopens_development():
    # Seed 0, bugs certain: milestones at ticks 2 PRD, 4 design, 7 API, 8 UI, 9 integration, 11 tests
    # find a bug in the UI, 12 UI fixed, 14 tests, 15 release (the episode ends).
    every3 = oracle_episode(GoalSchedule(3, at_milestones=False), engineers=2, bug_rate=1.0)
    assert every3 == [(0, "phase:requirements"), (3, "phase:design"), (6, "phase:development"),
                      (9, "phase:test"), (12, "phase:test")]
    at_milestones = oracle_episode(GoalSchedule(3, at_milestones=True), engineers=2, bug_rate=1.0)
    assert at_milestones == [(0, "phase:requirements"), (2, "phase:design"), (4, "phase:development"),
                             (7, "phase:development"), (8, "phase:development"), (9, "phase:test"),
                             (11, "phase:development"), (12, "phase:test"), (14, "phase:test")]
    world = make("software-team", names="heldout")
    world.reset(0)
    assert [g.text for g in world.goals()] == [
        "phase: requirements (spec)", "phase: design (blueprint)",
        "phase: development (backend service, frontend app, merge)", "phase: test (checks, launch)"]


def test_escape_room_goals_are_its_items_then_the_door():
    team = Team(make("escape-room", agents=2, items=2, zones=2))
    team.reset(3)
    assert [g.task for g in team.world.goals()] == ["bring:map", "bring:key"]
    seen = []
    while not team.finished and team.world.goals()[0].task != "open:door":
        seen.append(tuple(g.task for g in team.world.goals()))
        team.step(team.state.expert)
    assert [g.task for g in team.world.goals()] == ["open:door"] and not team.finished
    assert ("bring:map", "bring:key") in seen and len(set(seen)) == 2  # one item at the door, then both


def test_the_goal_is_in_the_tactical_prompt_and_changes_the_scores(tmp_path):
    coordinator = build_coordinator(config(tmp_path))
    team = Team(make("software-team"))
    flat = team.reset(0)
    goal = goal_state(team).candidates[1]
    state = team.set_goal(goal)
    assert state.goal == goal.text == "phase: design (design)" and flat.goal == ""
    assert f"\nGoal: {goal.text}\n" in user_text(state) and "Goal:" not in user_text(flat)
    with_goal, without = coordinator.act([state], greedy=True), coordinator.act([flat], greedy=True)
    assert not torch.equal(with_goal.logp, without.logp)  # the model reads it
    strategic = goal_state(team)
    assert strategic.task.endswith(STRATEGIC_ROLE) and strategic.goal == goal.text
    assert all(c.kind == "goal" for c in strategic.candidates)


def _lora(coordinator, adapter):
    return {n: p for n, p in coordinator.peft.named_parameters() if adapter_of(n) == adapter}


def test_each_adapter_gets_gradients_only_from_its_own_loss(tmp_path):
    trainer = Trainer(config(tmp_path))
    coordinator = trainer.coordinator
    tactical, _, _ = trainer.collect()
    strategic = trainer.hierarchy.rollout
    # one strategic decision per 2 ticks of the 6-tick episodes: ticks 0, 2, 4 (plus milestones)
    assert len(strategic) >= 6 and len(tactical) == 12
    for rollout, level, mine, other in ((tactical, "tactical", "default", "strategic"),
                                        (strategic, "strategic", "strategic", "default")):
        for p in coordinator.peft.parameters():
            p.grad = None
        with use_level(coordinator, level):  # as in the update: the step happens inside the level
            scores, values = coordinator.evaluate(rollout.handles)
            logp = masked_log_softmax(scores, rollout.mask)
            (logp.gather(1, rollout.actions[:, None]).sum() + values.sum()).backward()
        assert all(p.grad is None for p in _lora(coordinator, other).values()), level
        assert sum(float(p.grad.abs().sum()) for p in _lora(coordinator, mine).values() if p.grad is not None) > 0
    trainer.close()


@pytest.mark.parametrize("training", ["joint", "alternate"])
def test_updates_move_the_levels_the_schedule_names(tmp_path, training):
    trainer = Trainer(config(tmp_path, f"team.hierarchy.training={training}"))
    coordinator = trainer.coordinator
    for it in (1, 2):
        before = {a: {n: p.detach().clone() for n, p in _lora(coordinator, a).items()} for a in ("default", "strategic")}
        line = trainer._iteration(it)
        moved = {level: any(not torch.equal(p, before[a][n]) for n, p in _lora(coordinator, a).items())
                 for level, a in (("tactical", "default"), ("strategic", "strategic"))}
        want = levels_trained(training, it)
        assert moved == {level: level in want for level in moved}, (it, moved)
        assert line["hierarchy/strategic_updated"] == float("strategic" in want)
        assert ("strategic/policy/entropy" in line) == ("strategic" in want)
        assert line["episode/strategic_decisions"] >= 3 and line["episode/goal_switches"] >= 0
    trainer.close()


def test_evaluation_uses_the_hierarchical_policy_and_its_goals(tmp_path):
    cfg = config(tmp_path, "team.hierarchy.every=3", "team.hierarchy.at_milestones=false", "env.deadline=18")
    coordinator = build_coordinator(cfg)
    policies = build_policies(["trained", "zero-shot", "oracle"], coordinator=coordinator,
                              hierarchy=cfg.team.hierarchy)
    assert isinstance(policies["trained"], HierarchicalPolicy) and policies["zero-shot"].base
    transcripts: list = []
    run_episodes("software-team", {"deadline": 7}, policies["trained"], [5, 6], transcripts=transcripts)
    for t in transcripts:  # a goal from tick 0, chosen again at ticks 3 and 6
        assert [s["tick"] for s in t["steps"]] == list(range(7)) and all(s["goal"].startswith("phase: ") for s in t["steps"])
    assert policies["trained"].goals_set == 2 * 3


def test_a_resumed_hierarchical_run_ends_bitwise_equal_to_an_uninterrupted_one(tmp_path):
    with Trainer(config(tmp_path, "train.iterations=2", run="ref")) as ref:
        ref.run()
    with Trainer(config(tmp_path, "train.iterations=1")) as first:
        first.run()
    with Trainer(config(tmp_path, "train.iterations=2"), resume=True) as resumed:
        assert resumed.iteration == 1
        resumed.run()

    def lines(run):
        rows = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in rows]

    assert lines("run") == lines("ref") and [r["iteration"] for r in lines("run")] == [1, 2]
    final = Path("checkpoints/iter_000002/coordinator")
    for f in ("adapter/adapter_model.safetensors", "adapter/strategic/adapter_model.safetensors",
              "value_head.safetensors", "value_head_strategic.safetensors"):
        assert (tmp_path / "run" / final / f).read_bytes() == (tmp_path / "ref" / final / f).read_bytes(), f
    (tmp_path / "ref" / final / "adapter/strategic/adapter_model.safetensors").write_bytes(b"torn")
    # a damaged level is a damaged checkpoint: resume falls back past it
    assert "adapter/strategic/adapter_model.safetensors" in validate_checkpoint(tmp_path / "ref" / final.parent)


def test_a_world_without_goals_and_unsupported_settings_fail_with_the_key(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "examples" / "relay"))
    relay = load_config(None, [*BASE, "env.name=relay_world.world:RelayWorld", f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(TeamTRError, match=r"world 'relay' exposes no goals .*hierarchy.enabled=false"):
        Trainer(relay)
    assert not (tmp_path / "run").exists()
    for setting, words in (("team.directives=whole_team", "team.directives must be single"),
                           ("bc.enabled=true algo.ref=bc", "algo.ref=bc names one adapter, .* set algo.ref=base"),
                           ("algo.ref=bc model.init=runs/x/bc", "algo.ref=bc names one adapter"),
                           ("bc.enabled=true algo.ref=base bc.files=[x.jsonl]", "bc.files carry no phase goals"),
                           ("algo.name=trpo", "algo.name=trpo is not supported"),
                           ("model.rl_layers=1", "model.rl_layers=1 caches activations"),
                           ("rollout.backend=ray", "rollout.backend must be inline")):
        with pytest.raises(TeamTRError, match=rf"team.hierarchy.enabled=true: {words}"):
            config(tmp_path, *setting.split())
    with pytest.raises(TeamTRError, match=r"team.hierarchy.every"):
        config(tmp_path, "team.hierarchy.every=0")


def test_a_flat_checkpoint_is_refused_by_a_hierarchical_coordinator(tmp_path):
    flat = build_coordinator(config(tmp_path, "team.hierarchy.enabled=false"))
    flat.save(tmp_path / "flat")
    hier = build_coordinator(config(tmp_path))
    with pytest.raises(TeamTRError, match=r"no strategic adapter .*team.hierarchy.enabled=false"):
        hier.load(tmp_path / "flat")


def test_the_final_table_and_teamtr_eval_of_a_hierarchical_run_set_goals(tmp_path, capsys):
    from teamtr.cli import main

    run = tmp_path / "run"
    sets = [*TINY, "algo.ref=base", "model.rl_layers=all", "train.iterations=1", "train.final_eval_episodes=2", "train.final_zero_shot_episodes=2",
            f"run_dir={run}"]
    assert main(["train", *sum((["--set", s] for s in sets), [])]) == 0
    episodes = [json.loads(x) for x in (run / "eval_transcripts.jsonl").read_text().splitlines()]
    goals = {e["policy"]: {bool(s.get("goal")) for s in e["steps"]} for e in episodes}
    assert goals == {"trained": {True}, "zero-shot": {True}, "random": {False}, "oracle": {False}}
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run), "--episodes", "2", "--json", str(tmp_path / "e.json")]) == 0
    rows = json.loads((tmp_path / "e.json").read_text())["rows"]
    assert set(rows) == {"trained"} and rows["trained"]["length"] == 6.0


def test_the_bc_row_of_a_hierarchical_run_plays_both_cloned_adapters(tmp_path):
    from teamtr.cli import main
    from teamtr.policy.levels import read_levels
    from teamtr.train.checkpoint import latest_checkpoint

    run = tmp_path / "run"
    sets = [*TINY, "bc.enabled=true", "bc.demos=8", "bc.epochs=1", "bc.batch_size=8", "algo.ref=base",
            "model.rl_layers=all", "train.iterations=1", "train.final_eval_episodes=2",
            "train.final_zero_shot_episodes=0", "train.final_baselines=[]", f"run_dir={run}"]
    assert main(["train", *sum((["--set", s] for s in sets), [])]) == 0
    table = json.loads((run / "final_eval.json").read_text())
    assert set(table["rows"]) == {"trained", "bc"} and table["episodes"]["bc"] == 2
    episodes = [json.loads(x) for x in (run / "eval_transcripts.jsonl").read_text().splitlines()]
    assert {e["policy"]: {bool(s.get("goal")) for s in e["steps"]} for e in episodes} == {"trained": {True}, "bc": {True}}
    # the row's weights are the snapshot's, both levels; PPO had moved both since
    coordinator = build_coordinator(load_config(run / "config.yaml"))
    coordinator.load(latest_checkpoint(run) / "coordinator")
    state = {**coordinator.read_adapter(run / "bc"), **read_levels(coordinator, run / "bc")}
    trained = {a: {n: p.detach().clone() for n, p in _lora(coordinator, a).items()} for a in ("default", "strategic")}
    for adapter in ("default", "strategic"):
        assert {n for n in state if adapter_of(n) == adapter} == set(trained[adapter])
        assert any(not torch.equal(state[n], p) for n, p in trained[adapter].items()), adapter
    policy = HierarchicalPolicy(coordinator, GoalSchedule(every=2), state=state)
    with policy.session():
        assert all(torch.equal(p, state[n]) for a in ("default", "strategic") for n, p in _lora(coordinator, a).items())
    assert all(torch.equal(p, trained[a][n]) for a in trained for n, p in _lora(coordinator, a).items())


def test_oracle_demonstrations_carry_the_oracles_goals_and_its_goal_choices():
    goals = []
    make_team = lambda: Team(make("software-team", engineers=2, bug_rate=0.5), history_len=1)  # noqa: E731
    demos = bc_mod.expert_demos(make_team, 60, seed=0, parallel=4, schedule=GoalSchedule(every=4), goals=goals)
    phases = [g.candidates[g.label] for g in goals]
    assert all(g.task.endswith(STRATEGIC_ROLE) and all(c.startswith("phase: ") for c in g.candidates) for g in goals)
    assert {p.split(" (")[0] for p in phases} >= {"phase: requirements", "phase: design", "phase: development"}
    # every tactical demonstration reads the goal in force, one the oracle chose
    assert all(d.goal in phases for d in demos)
    assert "Goal: phase: " in user_text(demos[-1])
    # the oracle's goals are due every 4 ticks and after milestones: fewer goal choices than decisions
    assert 60 // 4 <= len(goals) < 60


def test_a_hierarchical_run_clones_both_levels(tmp_path, monkeypatch):
    trainer = Trainer(config(tmp_path, "bc.enabled=true", "algo.ref=base", "bc.demos=24", "bc.epochs=1",
                             "bc.batch_size=8", "train.iterations=0"))
    calls, original = [], bc_mod.behaviour_clone
    snapshot = lambda: {n: p.detach().clone() for n, p in _lora(trainer.coordinator, "strategic").items()}  # noqa: E731
    monkeypatch.setattr(bc_mod, "behaviour_clone", lambda c, demos, **k: calls.append(
        (c.peft.active_adapters[0], demos, snapshot())) or original(c, demos, **k))
    before = {a: {n: p.detach().clone() for n, p in _lora(trainer.coordinator, a).items()}
              for a in ("default", "strategic")}
    trainer.warm_up()
    trainer.close()
    assert [a for a, _, _ in calls] == ["default", "strategic"]  # the strategic clone runs under its own adapter
    tactical, strategic = calls[0][1], calls[1][1]
    # the tactical cloning left the strategic adapter as it was
    assert all(torch.equal(calls[0][2][n], p) for n, p in calls[1][2].items())
    assert len(tactical) == 24 and all(d.goal for d in tactical)
    assert strategic and all(c.startswith("phase: ") for d in strategic for c in d.candidates)
    for adapter in ("default", "strategic"):  # each adapter moved
        after = _lora(trainer.coordinator, adapter)
        assert any(not torch.equal(before[adapter][n], p) for n, p in after.items()), adapter
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert any("bc/strategic_heldout_accuracy" in r for r in rows) and any("bc/heldout_accuracy" in r for r in rows)
    assert (tmp_path / "run" / "bc" / "adapter" / "strategic" / "adapter_model.safetensors").is_file()
