"""GAE over interleaved episodes against hand-computed numbers."""

from __future__ import annotations

import pytest
import torch

from teamtr.rl import RLInputError, gae, normalize

F, T = False, True


def _gae(rewards, values, term, trunc, boot, ep, gamma=0.5, lam=0.5):
    return gae(torch.tensor(rewards), torch.tensor(values), torch.tensor(term), torch.tensor(trunc),
               torch.tensor(boot), torch.tensor(ep), gamma, lam)


def test_four_step_episode_with_termination() -> None:
    # deltas: 1 + .5*.5 - .5 = .75, -.25, -.25, 1 + 0 - .5 = .5 (no bootstrap after termination)
    # A3 = .5; A2 = -.25 + .25*.5 = -.125; A1 = -.25 + .25*-.125 = -.28125; A0 = .75 - .0703125
    adv, ret = _gae([1.0, 0, 0, 1], [0.5] * 4, [F, F, F, T], [F] * 4, [2.0] * 4, [7] * 4)
    assert adv.tolist() == pytest.approx([0.6796875, -0.28125, -0.125, 0.5])
    assert ret.tolist() == pytest.approx([1.1796875, 0.21875, 0.375, 1.0])


def test_four_step_episode_with_truncation_bootstraps() -> None:
    # delta3 = 1 + .5*2 - .5 = 1.5; A2 = -.25 + .375 = .125; A1 = -.21875; A0 = .75 - .0546875
    adv, _ = _gae([1.0, 0, 0, 1], [0.5] * 4, [F] * 4, [F, F, F, T], [9.0, 9.0, 9.0, 2.0], [7] * 4)
    assert adv.tolist() == pytest.approx([0.6953125, -0.21875, 0.125, 1.5])


def test_interleaved_episodes_give_the_same_numbers_as_separate_ones() -> None:
    # Episode 7 (terminated) and episode 3 (truncated) appended tick by tick, as batched teams do.
    a7 = ([1.0, 0, 0, 1], [0.5] * 4, [F, F, F, T], [F] * 4, [0.0] * 4)
    a3 = ([0.0, 2, 1, 0], [1.0, 0, 2, 1], [F] * 4, [F, F, F, T], [0.0, 0, 0, 3])
    cols = [[x for pair in zip(c7, c3) for x in pair] for c7, c3 in zip(a7, a3)]
    adv, ret = _gae(*cols, [7, 3] * 4)
    adv7, _ = _gae(*a7, [7] * 4)
    adv3, _ = _gae(*a3, [3] * 4)
    assert adv[0::2].tolist() == pytest.approx(adv7.tolist())
    assert adv[1::2].tolist() == pytest.approx(adv3.tolist())


def test_terminated_wins_over_truncated() -> None:
    adv, _ = _gae([1.0], [0.0], [T], [T], [100.0], [0])
    assert adv.tolist() == [1.0]


def test_malformed_episodes_are_named() -> None:
    with pytest.raises(RLInputError, match="episode 4 ends at decision 1 with neither"):
        _gae([0.0, 0.0], [0.0, 0.0], [F, F], [F, F], [0.0, 0.0], [4, 4])
    with pytest.raises(RLInputError, match="decision 0 of episode 4 is marked"):
        _gae([0.0, 0.0], [0.0, 0.0], [T, T], [F, F], [0.0, 0.0], [4, 4])
    with pytest.raises(RLInputError, match="gamma = 1.5 is out of range"):
        _gae([0.0], [0.0], [T], [F], [0.0], [0], gamma=1.5)
    with pytest.raises(RLInputError, match=r"values has shape \(2,\)"):
        _gae([0.0], [0.0, 1.0], [T], [F], [0.0], [0])


def test_normalize() -> None:
    out = normalize(torch.tensor([1.0, 3.0]))
    assert out.tolist() == pytest.approx([-1.0, 1.0], abs=1e-6)
    assert normalize(torch.tensor([5.0])).tolist() == [0.0]
