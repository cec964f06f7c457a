"""KL controllers and schedules against the formulas, by hand."""

from __future__ import annotations

import math

import pytest

from teamtr.rl import (AdaptiveKLController, FixedKLController, RLInputError, linear_decay,
                       make_kl_controller, warmup_cosine)


def test_adaptive_controller_moves_beta_by_the_formula() -> None:
    ctl = AdaptiveKLController(init_coef=0.1, target=0.02, horizon=1000)
    ctl.update(current_kl=0.03, n_steps=100)  # e = 0.5 clipped to 0.2: beta *= 1 + 0.2 * 0.1
    assert ctl.value == pytest.approx(0.1 * 1.02)
    ctl.update(current_kl=0.019, n_steps=500)  # e = -0.05: beta *= 1 - 0.05 * 0.5
    assert ctl.value == pytest.approx(0.1 * 1.02 * 0.975)
    ctl.update(current_kl=0.0, n_steps=1000)  # e = -1 clipped to -0.2: beta *= 0.8
    assert ctl.value == pytest.approx(0.1 * 1.02 * 0.975 * 0.8)


def test_controllers_save_and_load() -> None:
    a = AdaptiveKLController(0.1, 0.02, 1000)
    a.update(0.05, 300)
    b = AdaptiveKLController(0.5, 0.5, 5)
    b.load_state_dict(a.state_dict())
    assert (b.value, b.target, b.horizon) == (a.value, 0.02, 1000)
    f = FixedKLController(0.3)
    f.update(10.0, 10_000)
    assert f.value == 0.3
    g = FixedKLController(0.0)
    g.load_state_dict(f.state_dict())
    assert g.value == 0.3


def test_make_kl_controller_rejects_unknown_kind() -> None:
    assert isinstance(make_kl_controller("adaptive", 0.1, 0.02, 10), AdaptiveKLController)
    with pytest.raises(RLInputError, match="kl_control = 'pid' is not allowed"):
        make_kl_controller("pid", 0.1, 0.02, 10)
    with pytest.raises(RLInputError, match="target_kl = -0.1"):
        AdaptiveKLController(0.1, -0.1, 10)


def test_warmup_then_cosine() -> None:
    assert [warmup_cosine(s, 4, 14) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert warmup_cosine(4, 4, 14) == 1.0
    assert warmup_cosine(9, 4, 14) == pytest.approx(0.5)  # half way: (1 + cos(pi/2)) / 2
    assert warmup_cosine(14, 4, 14) == pytest.approx(0.0)
    assert warmup_cosine(99, 4, 14, min_ratio=0.1) == pytest.approx(0.1)
    assert warmup_cosine(9, 4, 14, min_ratio=0.1) == pytest.approx(0.1 + 0.9 * 0.5)
    assert warmup_cosine(5, 0, 0) == 1.0


def test_entropy_decays_linearly_to_its_floor() -> None:
    assert linear_decay(0, 0.05, 0.01, 100) == 0.05
    assert linear_decay(25, 0.05, 0.01, 100) == pytest.approx(0.04)
    assert linear_decay(100, 0.05, 0.01, 100) == pytest.approx(0.01)
    assert linear_decay(10_000, 0.05, 0.01, 100) == pytest.approx(0.01)
    assert not math.isnan(linear_decay(3, 0.05, 0.01, 0))
