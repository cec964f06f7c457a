"""Replay of successes: rank priority by return, the imitation term (weight 0 = today's update bit for
bit), its metrics, and the buffer in the checkpoint."""

import json
import math

import pytest
import torch

from teamtr.config import load_config
from teamtr.envs import make
from teamtr.rl.losses import imitation_nll
from teamtr.team import Team
from teamtr.train.replay import ReplayTerm, SuccessReplay
from teamtr.train.trainer import Trainer

TINY = [
    "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=2", "rollout.parallel=2",
    "train.iterations=1", "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0",
    "algo.minibatch_size=32", "algo.epochs=1", "log.tensorboard=false", "env.max_steps=3",
    "algo.warmup_updates=0", "algo.lr=0.003",
]


def states(n: int):
    return [Team(make("escape-room")).reset(seed) for seed in range(n)]


def test_imitation_nll_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.9, 1.0]]))
    actions = torch.tensor([1, 0])
    assert imitation_nll(logp, actions).item() == pytest.approx((math.log(4) + math.log(10)) / 2)
    w = torch.tensor([3.0, 1.0])
    assert imitation_nll(logp, actions, w).item() == pytest.approx((3 * math.log(4) + math.log(10)) / 4)


def test_buffer_keeps_the_best_returns_in_rank_order():
    s = states(4)
    replay = SuccessReplay(capacity=3, alpha=1.0)
    for ret, k in [(1.0, 0), (5.0, 1), (3.0, 2), (5.0, 3), (0.5, 0)]:
        replay.add(ret, [(s[k], k)])
    assert [r for r, _ in replay.episodes] == [5.0, 5.0, 3.0]
    assert [d[0][1] for _, d in replay.episodes] == [1, 3, 2]  # a tie keeps the older first
    assert replay.probabilities().tolist() == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    picks = [a for _, a in replay.sample(5500)]
    assert [round(picks.count(k) / 500) for k in (1, 3, 2)] == [6, 3, 2]
    assert SuccessReplay(3, 0.0).probabilities().numel() == 0
    replay.alpha = 0.0
    assert replay.probabilities().tolist() == pytest.approx([1 / 3] * 3)


def test_buffer_state_round_trips_through_json():
    s = states(3)
    replay = SuccessReplay(capacity=4, alpha=0.7, seed=5)
    replay.add(2.0, [(s[0], 1), (s[1], 0)])
    replay.add(4.0, [(s[2], 3)])
    replay.sample(3)
    state = replay.state_dict()
    text = json.dumps(state["episodes"])  # the checkpoint writes it as JSON
    other = SuccessReplay(capacity=4, alpha=0.7)
    other.load_state_dict({"episodes": json.loads(text), "generator": state["generator"]})
    assert other.episodes == replay.episodes
    assert other.sample(20) == replay.sample(20)


def _trainer(tmp_path, name, *extra):
    return Trainer(load_config(None, [*TINY, f"run_dir={tmp_path / name}", *extra]))


def _updated(tmp_path, name, coef):
    """A trainer after one update on its first rollout, with a replay term of weight ``coef`` (or none)."""
    trainer = _trainer(tmp_path, name)
    rollout, _, _ = trainer.collect()
    replay = SuccessReplay(8, 1.0)
    replay.add(1.0, [(s, s.expert) for s in states(6)])
    if coef is not None:
        trainer.algo.auxiliary = ReplayTerm(trainer.coordinator, replay, coef, batch=6)
    metrics = trainer.update(rollout)
    return trainer, replay, metrics


def test_weight_zero_is_todays_update_exactly_and_a_weight_imitates(tmp_path):
    plain, replay, m0 = _updated(tmp_path, "plain", None)
    zero, _, mz = _updated(tmp_path, "zero", 0.0)
    a, b = plain.coordinator.adapter_state(), zero.coordinator.adapter_state()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert m0["policy/loss"] == mz["policy/loss"] and "loss/replay" not in m0 and mz["loss/replay"] > 0
    weighted, _, mw = _updated(tmp_path, "weighted", 5.0)

    def nll(trainer):
        s = [d[0] for d in replay.episodes[0][1]]
        with torch.no_grad():
            out = trainer.coordinator.act(s, greedy=True)
        return float(imitation_nll(out.logp.masked_fill(~out.mask, 0.0), torch.tensor([x.expert for x in s])))

    assert nll(weighted) < nll(plain) - 0.01, (nll(weighted), nll(plain))
    assert mw["loss/replay"] == pytest.approx(mz["loss/replay"], rel=1e-4)  # same first sample, same weights
    for t in (plain, zero, weighted):
        t.close()


def test_trainer_logs_and_checkpoints_the_buffer(tmp_path):
    trainer = _trainer(tmp_path, "run", "algo.replay_coef=0.5", "algo.replay_batch=4")
    trainer.replay.add(2.0, [(s, s.expert) for s in states(3)])
    trainer.run()
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert line["replay/size"] >= 3 and line["loss/replay"] > 0
    saved = trainer.replay.state_dict()
    trainer.close()
    resumed = Trainer(load_config(None, [*TINY, f"run_dir={tmp_path / 'run'}", "algo.replay_coef=0.5",
                                         "algo.replay_batch=4"]), resume=True)
    assert resumed.replay.episodes == trainer.replay.episodes
    assert torch.equal(resumed.replay.generator.get_state(), saved["generator"])
    resumed.close()
