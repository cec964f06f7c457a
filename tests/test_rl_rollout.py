"""Rollout storage: batched appends with different candidate counts, GAE by episode, minibatches."""

from __future__ import annotations

import pytest
import torch

from teamtr.rl import RLInputError, Rollout, gae


def _tick(n: int, c: int, episode: list[int], done: bool, reward: float = 1.0) -> dict:
    logp = torch.log_softmax(torch.arange(c, dtype=torch.float32).repeat(n, 1), dim=1)
    return dict(logp=logp, ref_logp=logp, mask=torch.ones(n, c, dtype=torch.bool),
                actions=torch.zeros(n, dtype=torch.long), values=torch.full((n,), 0.5),
                rewards=torch.full((n,), reward), terminated=torch.full((n,), done),
                truncated=torch.zeros(n, dtype=torch.bool), episode_id=torch.tensor(episode))


def test_appends_pad_to_the_widest_row_and_keep_order() -> None:
    buf = Rollout()
    buf.append(**_tick(2, 3, [0, 1], False))
    buf.append(**_tick(2, 5, [0, 1], True))
    assert len(buf) == 4
    assert buf.mask.shape == (4, 5)
    assert buf.mask.sum(dim=1).tolist() == [3, 3, 5, 5]
    assert buf.logp[0, 3:].tolist() == [0.0, 0.0]  # padding holds 0
    assert buf.episode_id.tolist() == [0, 1, 0, 1]
    assert buf.handles.tolist() == [-1] * 4 and buf.bootstrap_values.tolist() == [0.0] * 4


def test_single_decision_append_and_from_tensors_agree() -> None:
    one = Rollout()
    one.append(logp=torch.tensor([-0.1, -2.4]), ref_logp=torch.tensor([-0.1, -2.4]),
               mask=torch.tensor([True, True]), actions=1, values=0.3, rewards=2.0,
               terminated=True, truncated=False, episode_id=9, handles=4)
    many = Rollout.from_tensors(logp=torch.tensor([[-0.1, -2.4]]), ref_logp=torch.tensor([[-0.1, -2.4]]),
                                mask=torch.tensor([[True, True]]), actions=torch.tensor([1]),
                                values=torch.tensor([0.3]), rewards=torch.tensor([2.0]),
                                terminated=torch.tensor([True]), truncated=torch.tensor([False]),
                                episode_id=torch.tensor([9]), handles=torch.tensor([4]))
    for name in ("logp", "mask", "actions", "values", "rewards", "terminated", "episode_id", "handles"):
        assert torch.equal(getattr(one, name), getattr(many, name)), name


def test_compute_advantages_groups_interleaved_episodes() -> None:
    buf = Rollout()
    buf.append(**_tick(2, 3, [0, 1], False, reward=1.0))
    buf.append(**_tick(2, 3, [0, 1], True, reward=0.0))
    buf.compute_advantages(gamma=0.5, lam=1.0, normalize=False)
    # each episode: deltas 1 + .25 - .5 = .75 and 0 - .5 = -.5; A0 = .75 + .5 * -.5 = .5
    assert buf.advantages.tolist() == pytest.approx([0.5, 0.5, -0.5, -0.5])
    assert buf.returns.tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])
    buf.compute_advantages(gamma=0.5, lam=1.0)
    assert buf.advantages.tolist() == pytest.approx([1.0, 1.0, -1.0, -1.0], abs=1e-6)
    assert buf.returns.tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])  # unnormalised targets
    ref, _ = gae(buf.rewards, buf.values, buf.terminated, buf.truncated, buf.bootstrap_values,
                 buf.episode_id, 0.5, 1.0)
    assert ref.tolist() == pytest.approx([0.5, 0.5, -0.5, -0.5])


def test_minibatches_cover_every_decision_once_and_cut_width() -> None:
    buf = Rollout()
    for i in range(10):
        buf.append(**_tick(1, 2 if i < 7 else 6, [i], True))
    buf.compute_advantages(0.99, 0.95)
    batches = list(buf.minibatches(4, torch.Generator().manual_seed(0)))
    assert sorted(len(b) for b in batches) == [3, 3, 4]
    seen = torch.cat([b.index for b in batches])
    assert sorted(seen.tolist()) == list(range(10))
    for b in batches:
        assert b.mask.shape[1] == (6 if (b.index >= 7).any() else 2)
        assert torch.equal(b.advantages, buf.advantages[b.index])
        assert torch.equal(b.logp, buf.logp[b.index, : b.mask.shape[1]])
    again = [b.index.tolist() for b in buf.minibatches(4, torch.Generator().manual_seed(0))]
    assert again == [b.index.tolist() for b in batches]


def test_bad_appends_and_reads_are_named() -> None:
    buf = Rollout()
    bad = _tick(2, 3, [0, 1], True)
    bad["mask"] = torch.tensor([[True, True, True], [False, False, False]])
    with pytest.raises(RLInputError, match="all-masked row"):
        buf.append(**bad)
    bad = _tick(2, 3, [0, 1], True)
    bad["values"] = torch.zeros(3)
    with pytest.raises(RLInputError, match=r"values has shape \(3,\); expected \[2\]"):
        buf.append(**bad)
    bad = _tick(2, 3, [0, 1], True)
    bad["ref_logp"] = torch.zeros(2, 4)
    with pytest.raises(RLInputError, match="ref_logp has shape"):
        buf.append(**bad)
    bad = _tick(1, 3, [0], True)
    bad["mask"] = torch.tensor([[True, False, False]])
    bad["actions"] = torch.tensor([2])
    with pytest.raises(RLInputError, match="valid"):
        buf.append(**bad)
    buf.append(**_tick(1, 3, [0], True))
    with pytest.raises(RLInputError, match="compute_advantages"):
        next(buf.minibatches(4))
    with pytest.raises(RLInputError, match="empty"):
        Rollout().compute_advantages(0.99, 0.95)
