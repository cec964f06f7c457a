"""Exact categorical maths and PPO loss terms against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from fuzz import examples
from hypothesis import strategies as st

from teamtr.rl import (RLInputError, categorical_kl, clipped_surrogate, clipped_value_loss, entropy,
                       explained_variance, masked_log_softmax, policy_terms)


def test_masked_log_softmax_matches_softmax_over_valid_candidates() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, 99.0, -7.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    logp = masked_log_softmax(scores, mask)
    z = math.exp(1) + math.exp(2) + math.exp(3)
    assert logp[0].tolist() == pytest.approx([1 - math.log(z), 2 - math.log(z), 3 - math.log(z)])
    assert logp[1].tolist() == [0.0, 0.0, 0.0]  # one candidate: log 1 = 0; padding holds 0


def test_masked_entries_never_change_a_result() -> None:
    mask = torch.tensor([[True, True, False, False]])
    a = masked_log_softmax(torch.tensor([[0.3, -1.2, 5.0, -3.0]]), mask)
    b = masked_log_softmax(torch.tensor([[0.3, -1.2, -80.0, 1e4]]), mask)
    assert torch.equal(a, b)
    q = masked_log_softmax(torch.tensor([[1.0, 0.0, 7.0, 7.0]]), mask)
    garbage = torch.tensor([[0.0, 0.0, 50.0, -50.0]])
    assert entropy(torch.where(mask, a, garbage), mask) == entropy(a, mask)
    assert categorical_kl(torch.where(mask, a, garbage), q, mask) == categorical_kl(a, q, mask)


def test_fill_sets_only_the_padded_entries() -> None:
    mask = torch.tensor([[True, True, False], [True, True, False]])
    scores = torch.tensor([[1.0, 3.0, float("-inf")], [-2.0, -1.0, 9.0]])
    zero, neg = masked_log_softmax(scores, mask), masked_log_softmax(scores, mask, fill=-math.inf)
    assert torch.equal(zero[mask], neg[mask])
    assert zero[~mask].tolist() == [0.0] * 2 and neg[~mask].tolist() == [-math.inf] * 2
    # With -inf, argmax and exp ignore padding (with 0 a padded entry beats every log-prob < 0).
    assert neg.argmax(-1).tolist() == [1, 1] and zero.argmax(-1).tolist() == [2, 2]
    assert neg.exp().sum(-1).tolist() == pytest.approx([1.0, 1.0])


def test_entropy_of_uniform_and_of_a_point_mass() -> None:
    mask = torch.tensor([[True] * 4, [True, False, False, False]])
    logp = masked_log_softmax(torch.zeros(2, 4), mask)
    assert entropy(logp, mask).tolist() == pytest.approx([math.log(4), 0.0], abs=1e-7)


def test_kl_of_identical_and_of_known_distributions() -> None:
    mask = torch.ones(1, 2, dtype=torch.bool)
    p = torch.tensor([[0.25, 0.75]]).log()
    q = torch.tensor([[0.5, 0.5]]).log()
    assert categorical_kl(p, p, mask).item() == 0.0
    expected = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)  # 0.130812...
    assert categorical_kl(p, q, mask).item() == pytest.approx(expected, abs=1e-6)
    # A zero-probability candidate of p contributes 0 even where q is tiny.
    p0 = torch.tensor([[0.0, 1.0]]).log()
    assert categorical_kl(p0, q, mask).item() == pytest.approx(math.log(2), abs=1e-6)


@pytest.mark.parametrize(("ratio", "adv", "loss"), [
    (1.1, 2.0, -2.2),   # inside the range: r A
    (1.5, 2.0, -2.4),   # A > 0, r above 1 + eps: clipped to 1.2 A
    (0.5, 2.0, -1.0),   # A > 0, r below 1 - eps: min picks r A (no clip benefit)
    (0.9, -2.0, 1.8),   # inside, A < 0
    (0.5, -2.0, 1.6),   # A < 0, r below 1 - eps: clipped to 0.8 A
    (1.5, -2.0, 3.0),   # A < 0, r above 1 + eps: min picks r A (pessimistic)
])
def test_clipped_surrogate_inside_and_outside_the_range(ratio: float, adv: float, loss: float) -> None:
    out = clipped_surrogate(torch.tensor([ratio]), torch.tensor([adv]), 0.2)
    assert out.item() == pytest.approx(loss)


def test_unclipped_surrogate_is_ratio_times_advantage() -> None:
    assert clipped_surrogate(torch.tensor([3.0]), torch.tensor([2.0]), None).item() == -6.0


def test_clipped_value_loss_takes_the_larger_error() -> None:
    # V moved 0.5 away from V_old=0 toward R=1: clipped V = 0.2 has the larger error (0.64).
    v, old, ret = torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([1.0])
    assert clipped_value_loss(v, old, ret, 0.2).item() == pytest.approx(0.5 * 0.64)
    assert clipped_value_loss(v, old, ret, None).item() == pytest.approx(0.5 * 0.25)


def test_explained_variance() -> None:
    ret = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(ret, ret) == 1.0
    assert explained_variance(torch.full((4,), 2.5), ret) == pytest.approx(0.0)
    assert math.isnan(explained_variance(ret, torch.ones(4)))


def test_policy_terms_numbers_and_log_ratio_clamp() -> None:
    mask = torch.ones(2, 2, dtype=torch.bool)
    old = torch.tensor([[0.5, 0.5], [0.5, 0.5]]).log()
    new = torch.tensor([[0.75, 0.25], [0.5, 0.5]]).log()
    t = policy_terms(new, old, old, mask, torch.tensor([0, 1]), torch.tensor([1.0, -1.0]),
                     clip_eps=0.2, ent_coef=0.1, kl_coef=0.5)
    # ratios 1.5 (clipped to 1.2 for A=1) and 1.0: surrogate mean (1.2 - 1.0) / 2 = 0.1
    assert t.surrogate.item() == pytest.approx(0.1)
    kl = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)  # KL(ref || new), row 0
    ent = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) + math.log(2)
    assert t.kl_ref_new.item() == pytest.approx(kl / 2, abs=1e-6)
    assert t.entropy.item() == pytest.approx(ent / 2, abs=1e-6)
    assert t.objective.item() == pytest.approx(0.1 + 0.1 * ent / 2 - 0.5 * kl / 2, abs=1e-6)
    assert (t.clip_frac.item(), t.ratio_min.item(), t.ratio_max.item()) == pytest.approx((0.5, 1.0, 1.5))
    huge = policy_terms(torch.tensor([[0.0, -1e4]]), torch.tensor([[-1e4, 0.0]]),
                        torch.tensor([[-1e4, 0.0]]), torch.ones(1, 2, dtype=torch.bool),
                        torch.tensor([0]), torch.tensor([1.0]), clip_eps=None, ent_coef=0, kl_coef=0)
    assert huge.ratio_max.item() == pytest.approx(math.exp(20.0), rel=1e-5)


def test_bad_input_gives_clear_errors() -> None:
    with pytest.raises(RLInputError, match="all-masked row"):
        masked_log_softmax(torch.zeros(2, 3), torch.tensor([[True, False, False], [False] * 3]))
    with pytest.raises(RLInputError, match=r"scores has shape \(2, 4\) but mask has \(2, 3\)"):
        masked_log_softmax(torch.zeros(2, 4), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(RLInputError, match="bool"):
        masked_log_softmax(torch.zeros(2, 3), torch.ones(2, 3))


@settings(max_examples=examples(60))
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 6), width=st.integers(1, 7))
# Cases whose wider-row KL differed in float32 rounding (up to 1e-6 here), beyond allclose defaults.
@example(seed=35, rows=5, width=7)
@example(seed=32, rows=6, width=7)
@example(seed=6, rows=1, width=7)
def test_padding_never_changes_any_quantity(seed: int, rows: int, width: int) -> None:
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, width + 1, (rows,), generator=g)
    mask = torch.arange(width)[None, :] < counts[:, None]
    a, b = torch.randn(rows, width, generator=g) * 3, torch.randn(rows, width, generator=g) * 3
    noise = torch.randn(rows, width, generator=g) * 100
    la, lb = masked_log_softmax(a, mask), masked_log_softmax(b, mask)
    la2 = masked_log_softmax(torch.where(mask, a, noise), mask)
    assert torch.equal(la, la2)
    assert torch.allclose(torch.where(mask, la.exp(), 0).sum(dim=1), torch.ones(rows), atol=1e-5)
    # Appending a padded column changes nothing either.
    wide = torch.cat([mask, torch.zeros(rows, 1, dtype=torch.bool)], dim=1)
    la3 = masked_log_softmax(torch.cat([a, torch.full((rows, 1), 1e3)], dim=1), wide)
    lb3 = masked_log_softmax(torch.cat([b, torch.full((rows, 1), -1e3)], dim=1), wide)
    # A wider row may sum in another order (vectorised reductions), so results agree to float32
    # rounding of the summed terms, not bitwise. The KL is a small difference of terms of up to ~20
    # nats, so its error scales with the terms' size (kl_terms), not with the KL itself.
    kl_terms = (la.exp() * (la - lb).abs()).sum(dim=1)
    kl = categorical_kl(la, lb, mask)
    assert ((categorical_kl(la3, lb3, wide) - kl).abs() <= 1e-6 * (1 + kl_terms)).all()
    assert torch.allclose(entropy(la3, wide), entropy(la, mask), rtol=1e-5, atol=1e-6)
    assert (kl >= -1e-6 * (1 + kl_terms)).all()
