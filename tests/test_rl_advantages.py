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


def test_group_advantages_by_hand():
    """GRPO: (R - mean_g) / (std_g + eps) with the population std; RLOO: R_i - mean of the others."""
    from teamtr.rl.advantages import group_advantages

    returns = torch.tensor([1.0, 3.0, 10.0, 10.0, 4.0])
    groups = torch.tensor([7, 7, 2, 2, 2])
    grpo = group_advantages(returns, groups, "group", eps=0.0)
    # group 7: mean 2, std 1 -> -1, +1; group 2: mean 8, std sqrt(8) -> 2/sqrt8, 2/sqrt8, -4/sqrt8
    s8 = 8 ** 0.5
    assert torch.allclose(grpo, torch.tensor([-1.0, 1.0, 2 / s8, 2 / s8, -4 / s8]), atol=1e-6)
    rloo = group_advantages(returns, groups, "loo")
    # 1 - 3, 3 - 1; 10 - (10+4)/2, 10 - 7, 4 - 10
    assert torch.allclose(rloo, torch.tensor([-2.0, 2.0, 3.0, 3.0, -6.0]), atol=1e-6)


def test_group_advantages_refuse_lonely_episodes_and_unknown_estimators():
    from teamtr.rl.advantages import group_advantages

    with pytest.raises(RLInputError, match=r"groups \[5\] hold one episode"):
        group_advantages(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4, 4, 5]), "loo")
    with pytest.raises(RLInputError, match="estimator = 'ppo' is not known"):
        group_advantages(torch.tensor([1.0, 2.0]), torch.tensor([0, 0]), "ppo")


def test_rollout_gives_every_decision_its_episodes_group_advantage():
    """Interleaved episodes of two groups: each decision carries its episode's RLOO advantage."""
    from teamtr.rl import Rollout

    r = Rollout()
    mask = torch.ones(2, 2, dtype=torch.bool)
    logp = torch.full((2, 2), -0.6931)
    # episodes 0, 1 (group 0) and 2, 3 (group 1); rewards per decision, episodes interleaved
    for eps, rew, grp, end in [([0, 2], [1.0, 5.0], [0, 1], [F, T]), ([1, 3], [0.0, 1.0], [0, 1], [T, F]),
                               ([0, 3], [2.0, 0.0], [0, 1], [T, T])]:
        r.append(logp=logp, ref_logp=logp, mask=mask, actions=torch.tensor([0, 1]), values=torch.zeros(2),
                 rewards=torch.tensor(rew), terminated=torch.tensor(end),
                 truncated=torch.tensor([False, False]), episode_id=torch.tensor(eps), group_id=torch.tensor(grp))
    r.compute_advantages(0.99, 0.95, normalize=False, estimator="loo")
    # returns: ep0 = 3, ep1 = 0, ep2 = 5, ep3 = 1 -> loo: 3, -3, 4, -4
    expected = {0: 3.0, 1: -3.0, 2: 4.0, 3: -4.0}
    assert r.advantages.tolist() == [expected[int(e)] for e in r.episode_id]


def test_rollout_refuses_group_baselines_without_groups():
    from teamtr.rl import Rollout

    r = Rollout()
    r.append(logp=torch.zeros(1, 1), ref_logp=torch.zeros(1, 1), mask=torch.ones(1, 1, dtype=torch.bool),
             actions=0, values=0.0, rewards=1.0, terminated=True, truncated=False, episode_id=0)
    with pytest.raises(RLInputError, match="group baselines need one group_id"):
        r.compute_advantages(0.99, 0.95, estimator="group")
