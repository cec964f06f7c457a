"""The final evaluation's shortcuts keep every number exact: memoised greedy choices equal scoring
every state, zero-shot inside its session equals the adapter switched off per call, and the table
labels the world's expert and shows its headline metrics."""

import pytest
import torch

from teamtr.eval.evaluate import run_episodes
from teamtr.eval.policies import ClonedPolicy, CoordinatorPolicy, ZeroShotPolicy, decision_key, expert_name
from teamtr.eval.suites import evaluate_table, table_columns
from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator
from teamtr.telemetry.metrics import METRICS, EpisodeTracker, headline_metrics, summarize
from teamtr.cli import format_table
from teamtr.telemetry.log import FINAL_PARTIAL_FILE
from teamtr.core import Directive, Event, TeamTRError

SMALL = {"agents": 2, "items": 2, "max_steps": 6}
SEEDS = list(range(12))


class Unmemoised(CoordinatorPolicy):
    """The slow path: every state scored, every time."""

    def choose(self, states):
        choices, self.last_probs = self._score(states)
        return choices


@pytest.fixture(scope="module")
def coordinator():
    coord = Coordinator(load_backbone("tiny-random", device="cpu"))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # a non-zero adapter, so that adapter on and off differ
        for group in coord.policy_param_groups():
            for p in group["params"]:
                p.add_(0.5 * torch.randn(p.shape, generator=g))
    coord.weights_changed()
    return coord


def test_memoised_greedy_choices_equal_scoring_every_state(coordinator):
    fast, slow = CoordinatorPolicy(coordinator), Unmemoised(coordinator)
    fast_log, slow_log = [], []
    got = run_episodes("escape-room", SMALL, fast, SEEDS, history_len=1, transcripts=fast_log)
    want = run_episodes("escape-room", SMALL, slow, SEEDS, history_len=1, transcripts=slow_log)
    assert [m.as_dict() for m in got] == [m.as_dict() for m in want]
    decisions = sum(len(t["steps"]) for t in slow_log)
    assert slow.scored == decisions and fast.scored < decisions  # repeated prompts were not scored again
    assert fast.scored == len(fast.memo)  # each distinct prompt scored exactly once
    for a, b in zip(fast_log, slow_log):
        assert [s["choice"] for s in a["steps"]] == [s["choice"] for s in b["steps"]]
        for x, y in zip(a["steps"], b["steps"]):
            assert x["probs"] == pytest.approx(y["probs"], abs=1e-5)


def test_sampling_policy_memoises_nothing(coordinator):
    policy = CoordinatorPolicy(coordinator, greedy=False, seed=1)
    run_episodes("escape-room", SMALL, policy, SEEDS[:4], history_len=1)
    assert not policy.memo and policy.scored > 0


def probs(log):
    return [p for t in log for s in t["steps"] for p in s["probs"]]


def test_zero_shot_session_equals_adapter_off_per_call(coordinator):
    in_session, per_call, adapter_on = [], [], []
    evaluate_table("escape-room", {"heldout": SMALL}, {"zero-shot": ZeroShotPolicy(coordinator)}, SEEDS[:4],
                   history_len=1, transcripts=in_session)
    run_episodes("escape-room", SMALL, ZeroShotPolicy(coordinator), SEEDS[:4], history_len=1, transcripts=per_call)
    run_episodes("escape-room", SMALL, CoordinatorPolicy(coordinator), SEEDS[:4], history_len=1,
                 transcripts=adapter_on)
    assert probs(in_session) == pytest.approx(probs(per_call), abs=1e-6)
    # the adapter moves the probabilities, so the equality above says the session switched it off
    assert max(abs(a - b) for a, b in zip(probs(in_session), probs(adapter_on))) > 1e-3


def test_cloned_session_scores_with_the_other_adapter_and_gives_the_own_back(coordinator):
    """The end-of-run table's bc row: inside its session the coordinator acts as the snapshot's weights
    (equal to a coordinator holding them, merged or not, to 1e-5), and afterwards as itself again."""
    own = coordinator.adapter_state()
    snapshot = {k: torch.zeros_like(v) if "lora_B" in k else v.clone() for k, v in own.items()}  # LoRA B = 0: the base model
    cloned, base, before, after = [], [], [], []
    run_episodes("escape-room", SMALL, CoordinatorPolicy(coordinator), SEEDS[:4], history_len=1, transcripts=before)
    evaluate_table("escape-room", {"heldout": SMALL}, {"bc": ClonedPolicy(coordinator, snapshot)}, SEEDS[:4],
                   history_len=1, transcripts=cloned)
    run_episodes("escape-room", SMALL, ZeroShotPolicy(coordinator), SEEDS[:4], history_len=1, transcripts=base)
    run_episodes("escape-room", SMALL, CoordinatorPolicy(coordinator), SEEDS[:4], history_len=1, transcripts=after)
    assert any("lora_B" in k for k in own)
    assert probs(cloned) == pytest.approx(probs(base), abs=1e-5)
    assert max(abs(a - b) for a, b in zip(probs(cloned), probs(before))) > 1e-3
    assert probs(after) == pytest.approx(probs(before), abs=1e-6)
    assert all(torch.equal(v, coordinator.adapter_state()[k]) for k, v in own.items())


def test_decision_key_is_what_the_prompt_is_built_from():
    from teamtr.envs import make
    from teamtr.team import Team

    team = Team(make("escape-room", **SMALL), history_len=1)
    state = team.reset(0)
    after = team.step(state.expert)[0]
    assert decision_key(state) != decision_key(after)
    assert decision_key(state) == decision_key(Team(make("escape-room", **SMALL), history_len=1).reset(0))


def test_expert_row_takes_the_worlds_word_and_headline_metrics_follow_success():
    pytest.importorskip("overcooked")
    rows = evaluate_table("overcooked", {"heldout": {"horizon": 60, "goal_soups": 1}}, {"oracle": _expert()}, [0, 1])
    assert list(rows) == ["heuristic"] and expert_name(_world("overcooked")) == "heuristic"
    assert expert_name(_world("escape-room")) == "oracle"
    assert table_columns("overcooked") == ("success", "soups", *METRICS[1:])
    assert table_columns("escape-room") == METRICS
    # soups counts the deliveries: exactly the "soup delivered" milestones of the episodes
    assert rows["heuristic"]["soups"] == rows["heuristic"]["events/soup"]


def test_headline_metric_is_the_mean_count_of_its_event_kind():
    episodes = []
    for n in (0, 2, 3):
        tracker = EpisodeTracker(2)
        tracker.update(Directive("a: x", "a", "x"), [Event("soup")] * n + [Event("milestone")], 1.0)
        episodes.append(tracker.finish())
    out = summarize(episodes, {"soups": "soup"})
    assert out["soups"] == pytest.approx(5 / 3) and out["milestones"] == 1.0
    # its spread over the episodes (population std of 0, 2, 3), shown as mean ± std in printed tables
    assert out["soups_std"] == pytest.approx(((25 + 1 + 16) / 27) ** 0.5)
    assert summarize([], {"soups": "soup"})["soups"] == 0.0
    assert "1.667 ± 1.247" in format_table({"trained": out}, ("success", "soups"))

    class Bad:
        name = "bad"
        headline_metrics = {"return": "soup"}

    with pytest.raises(TeamTRError, match="headline metric 'return'"):
        headline_metrics(Bad)


def _world(name):
    from teamtr.envs import world_class

    return world_class(name)


def _expert():
    from teamtr.eval.policies import OraclePolicy

    return OraclePolicy()


def test_spread_heads_its_tables_with_landmarks_covered():
    pytest.importorskip("mpe2")
    assert table_columns("spread")[:2] == ("success", "landmarks_covered")


def test_report_orders_the_final_table_by_its_columns(tmp_path):
    import json

    from teamtr.telemetry.report import _final_table

    rows = {"heuristic": {"success": 1.0, "return": 2.0, "soups": 8.5, "events/soup": 8.5}}
    (tmp_path / "final_eval.json").write_text(json.dumps({"columns": ["success", "soups", "return"], "rows": rows}))
    html = _final_table(tmp_path)
    heads = [h.split("</th>")[0] for h in html.split("<th>")[1:]]
    assert heads == ["policy", "success", "soups", "return", "events/soup"]
    assert "<td>heuristic</td><td>1.000</td><td>8.500</td><td>2.000</td>" in html


def test_an_interrupted_final_table_resumes_at_the_next_policy(tmp_path, monkeypatch):
    """A session's end in the middle of the end-of-run table: the policies already played are kept
    (rows and episodes), the rest are played on the next call, and the table equals an uninterrupted
    one; a partial table of another iteration is not trusted."""
    import json

    from teamtr import cli
    from teamtr.config import load_config
    from teamtr.train.trainer import Trainer

    sets = ["model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=2", "rollout.parallel=2",
            "train.iterations=1", "train.eval_every=0", "train.checkpoint_every=1", "algo.minibatch_size=8",
            "algo.epochs=1", "log.tensorboard=false", "env.max_steps=4", "env.agents=2", "env.items=2",
            "train.final_eval_episodes=3", "train.final_zero_shot_episodes=2", "algo.warmup_updates=0"]
    whole = load_config(None, [*sets, f"run_dir={tmp_path / 'whole'}"])
    with Trainer(whole) as trainer:
        trainer.run()
        want = cli.final_table(trainer, whole)
    assert not (tmp_path / "whole" / FINAL_PARTIAL_FILE).exists()

    cut = load_config(None, [*sets, f"run_dir={tmp_path / 'cut'}"])
    played: list[str] = []
    ends = [True]  # the session ends once, during the third policy
    real = cli.evaluate_table

    def evaluate(env, suites, policies, seeds, **kw):
        (name,) = policies
        played.append(name)
        if name == "random" and ends:
            ends.clear()
            raise RuntimeError("the session ended")
        return real(env, suites, policies, seeds, **kw)

    monkeypatch.setattr(cli, "evaluate_table", evaluate)
    with Trainer(cut) as trainer:
        trainer.run()
        with pytest.raises(RuntimeError, match="session ended"):
            cli.final_table(trainer, cut)
    saved = json.loads((tmp_path / "cut" / FINAL_PARTIAL_FILE).read_text())
    assert played == ["trained", "zero-shot", "random"] and list(saved["done"]) == ["trained", "zero-shot"]
    assert len(saved["done"]["trained"]["transcripts"]) == 3 and not (tmp_path / "cut" / "final_eval.json").exists()

    played.clear()
    with Trainer(cut, resume=True) as trainer:
        trainer.run()  # nothing left to train
        got = cli.final_table(trainer, cut)
    assert played == ["random", "oracle"]  # trained and zero-shot were not played again
    assert got == want and list(got) == list(want)
    evals = [json.loads(x) for x in (tmp_path / "cut" / "eval_transcripts.jsonl").read_text().splitlines()]
    assert [e["policy"] for e in evals] == ["trained"] * 3 + ["zero-shot"] * 2 + ["random"] * 3 + ["oracle"] * 3
    assert not (tmp_path / "cut" / FINAL_PARTIAL_FILE).exists()

    # a partial table from another iteration (the run trained on since) is replayed in full
    saved["key"]["iteration"] = 0
    (tmp_path / "cut" / FINAL_PARTIAL_FILE).write_text(json.dumps(saved))
    played.clear()
    with Trainer(cut, resume=True) as trainer:
        trainer.run()
        assert cli.final_table(trainer, cut) == want
    assert played == ["trained", "zero-shot", "random", "oracle"]
