"""PPO, PG and TRPO on a small linear-softmax problem: call counts, guards, state, trust region."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import torch
from torch import Tensor

from teamtr.rl import (METRIC_KEYS, AlgoConfig, Minibatch, RLInputError, Rollout, categorical_kl,
                       line_search, make_algorithm, masked_log_softmax)


@dataclass
class Problem:
    """A one-step problem: decision i scores its candidates by ``phi[i] @ theta``; V is a table."""

    phi: Tensor
    mask: Tensor
    theta: Tensor
    vtable: Tensor
    rollout: Rollout
    calls: list[tuple[int, bool]] = field(default_factory=list)  # (batch size, grad enabled)
    poison: bool = False

    def evaluate(self, mb: Minibatch) -> tuple[Tensor, Tensor]:
        self.calls.append((len(mb), torch.is_grad_enabled()))
        scores = self.phi[mb.handles, : mb.mask.shape[1]] @ self.theta
        if self.poison:
            scores = scores * math.nan
        return scores, self.vtable[mb.handles]

    def objective(self) -> float:
        """The unclipped surrogate mean(ratio * A) over the rollout at the current theta."""
        with torch.no_grad():
            full = self.rollout.full_batch()
            logp = masked_log_softmax(self.evaluate(full)[0], full.mask)
            ratio = (logp.gather(1, full.actions[:, None]) - full.logp.gather(1, full.actions[:, None])).exp()
            return float((ratio.squeeze(1) * full.advantages).mean())

    def kl_old_new(self) -> float:
        with torch.no_grad():
            full = self.rollout.full_batch()
            logp = masked_log_softmax(self.evaluate(full)[0], full.mask)
            return float(categorical_kl(full.logp, logp, full.mask).mean())


def make_problem(seed: int = 0, n: int = 100, c: int = 5, d: int = 6) -> Problem:
    g = torch.Generator().manual_seed(seed)
    phi = torch.randn(n, c, d, generator=g)
    mask = torch.arange(c)[None, :] < torch.randint(2, c + 1, (n,), generator=g)[:, None]
    theta = (0.3 * torch.randn(d, generator=g)).requires_grad_()
    vtable = torch.zeros(n, requires_grad=True)
    w_true = torch.randn(d, generator=g)
    with torch.no_grad():
        logp = masked_log_softmax(phi @ theta, mask)
    actions = torch.multinomial(logp.exp() * mask, 1, generator=g).squeeze(1)
    rewards = (phi[torch.arange(n), actions] @ w_true)  # reward follows a hidden linear scorer
    rollout = Rollout.from_tensors(
        logp=logp, ref_logp=logp, mask=mask, actions=actions, values=torch.zeros(n), rewards=rewards,
        terminated=torch.ones(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
        episode_id=torch.arange(n), handles=torch.arange(n))
    rollout.compute_advantages(gamma=0.99, lam=0.95)
    return Problem(phi=phi, mask=mask, theta=theta, vtable=vtable, rollout=rollout)


def _algo(name: str, p: Problem, **cfg):
    config = AlgoConfig(**{"minibatch_size": 32, "warmup_updates": 0, **cfg})
    return make_algorithm(name, [{"params": [p.theta]}], [p.vtable], config)


def test_ppo_calls_evaluate_once_per_minibatch_per_epoch_and_improves() -> None:
    p = make_problem()
    algo = _algo("ppo", p, lr=0.01, target_kl=10.0)
    metrics = algo.update(p.evaluate, p.rollout)
    assert len(p.calls) == 4 * 4  # 100 decisions in 4 minibatches x 4 epochs, nothing more
    assert all(grad for _, grad in p.calls)
    assert set(metrics) == set(METRIC_KEYS)
    assert metrics["optim/epochs_run"] == 4.0 and metrics["optim/skipped_steps"] == 0.0
    assert p.objective() > 0.05  # the surrogate rose from 0 at ratio 1
    assert metrics["optim/lr"] == pytest.approx(0.01)
    assert metrics["optim/ent_coef"] == pytest.approx(0.05)
    assert 0 < metrics["policy/kl_old_new"] < 0.5 and metrics["policy/ratio_max"] > 1.0


def test_ppo_early_stop_checks_each_minibatch_before_its_step() -> None:
    p = make_problem()
    algo = _algo("ppo", p, lr=0.5, target_kl=1e-4)
    metrics = algo.update(p.evaluate, p.rollout)
    # The first minibatch sees ratio 1 (KL 0) and steps; the second sees the KL of that big step and
    # stops before its own: one step of 4 per epoch.
    assert len(p.calls) == 2 and metrics["optim/epochs_run"] == 0.25
    moderate = make_problem()
    algo = _algo("ppo", moderate, lr=0.05, target_kl=0.01)
    metrics = algo.update(moderate.evaluate, moderate.rollout)
    assert 0.25 <= metrics["optim/epochs_run"] < 4.0
    # A stop before the step keeps the policy near the trust region: at most one step beyond it.
    assert moderate.kl_old_new() < 10 * 1.5 * 0.01
    q = make_problem()
    pg = _algo("pg", q, lr=0.5, target_kl=1e-4)
    assert pg.update(q.evaluate, q.rollout)["optim/epochs_run"] == 4.0  # pg has no early stop


@pytest.mark.parametrize("name", ["ppo", "pg", "grpo"])
def test_micro_batches_take_the_same_steps_as_whole_minibatches(name: str) -> None:
    """Gradient accumulation over chunks of 7 (32-decision minibatches: chunks of 7, 7, 6, 6, 6)
    gives the parameters and metrics of one pass per minibatch, early stop included."""
    for lr, target_kl in ((0.05, 10.0), (0.5, 1e-3)):
        runs = []
        for micro in (None, 7):
            p = make_problem(seed=3)
            algo = _algo(name, p, lr=lr, target_kl=target_kl, micro_batch_size=micro)
            if name == "grpo":  # four episodes per world seed
                f = {k: getattr(p.rollout, k) for k in ("logp", "ref_logp", "mask", "actions", "values",
                                                        "rewards", "terminated", "truncated", "episode_id",
                                                        "handles")}
                p.rollout = Rollout.from_tensors(**f, group_id=torch.arange(100) % 25)
                p.rollout.compute_advantages(0.99, 0.95, normalize=False, estimator="group")
            metrics = algo.update(p.evaluate, p.rollout)
            runs.append((p, metrics))
        (whole, m1), (chunked, m2) = runs
        assert max(n for n, _ in chunked.calls) <= 7 < max(n for n, _ in whole.calls)
        assert torch.allclose(chunked.theta, whole.theta, atol=1e-6, rtol=0)
        assert torch.allclose(chunked.vtable, whole.vtable, atol=1e-6, rtol=0)
        assert m2["optim/epochs_run"] == m1["optim/epochs_run"]
        for key in ("policy/kl_old_new", "policy/entropy", "policy/clip_frac", "policy/ratio_max",
                    "value/loss", "optim/grad_norm", "value/explained_variance"):
            assert m2[key] == pytest.approx(m1[key], abs=1e-5), key
    assert (m1["optim/epochs_run"] < 4.0) == (name != "pg")  # the second setting stopped (pg never stops)


def test_micro_batch_size_is_checked() -> None:
    with pytest.raises(RLInputError, match="micro_batch_size"):
        AlgoConfig(micro_batch_size=0)


def test_non_finite_loss_skips_the_step_and_leaves_parameters() -> None:
    p = make_problem()
    p.poison = True
    before = p.theta.detach().clone(), p.vtable.detach().clone()
    metrics = _algo("ppo", p).update(p.evaluate, p.rollout)
    assert metrics["optim/skipped_steps"] == 16.0
    assert torch.equal(p.theta.detach(), before[0]) and torch.equal(p.vtable.detach(), before[1])


def test_state_dict_round_trip_reproduces_the_next_update() -> None:
    p = make_problem()
    a = _algo("ppo", p, lr=0.05, kl_control="adaptive", total_updates=5)
    a.update(p.evaluate, p.rollout)
    state = a.state_dict()
    saved = p.theta.detach().clone(), p.vtable.detach().clone()
    m1 = a.update(p.evaluate, p.rollout)
    after = p.theta.detach().clone()
    with torch.no_grad():
        p.theta.copy_(saved[0])
        p.vtable.copy_(saved[1])
    b = _algo("ppo", p, lr=0.05, kl_control="adaptive", total_updates=5)
    b.load_state_dict(state)
    m2 = b.update(p.evaluate, p.rollout)
    assert torch.allclose(p.theta.detach(), after) and m1 == pytest.approx(m2, nan_ok=True)
    assert b.updates_done == 2 and b.kl.value == a.kl.value


def test_a_huge_value_gradient_does_not_change_the_policy_step() -> None:
    thetas = []
    for scale in (1.0, 1000.0):  # same normalised advantages, value loss 1e6 times larger
        p = make_problem()
        r = p.rollout
        big = Rollout.from_tensors(logp=r.logp, ref_logp=r.ref_logp, mask=r.mask, actions=r.actions,
                                   values=r.values, rewards=r.rewards * scale,
                                   terminated=r.terminated, truncated=r.truncated,
                                   episode_id=r.episode_id, handles=r.handles)
        big.compute_advantages(0.99, 0.95)
        metrics = _algo("ppo", p, lr=0.05, target_kl=10.0).update(p.evaluate, big)
        thetas.append(p.theta.detach().clone())
        assert metrics["value/grad_norm"] > (100.0 if scale > 1 else 0.0)
    assert torch.allclose(thetas[0], thetas[1], atol=1e-5)


def test_lr_scale_multiplies_a_groups_learning_rate() -> None:
    p = make_problem()
    extra = torch.zeros(3, requires_grad=True)
    algo = make_algorithm("ppo", [{"params": [p.theta], "lr_scale": 4.0}, {"params": [extra]}],
                          [p.vtable], AlgoConfig(lr=0.01, warmup_updates=2))
    algo.update(p.evaluate, p.rollout)
    assert [g["lr"] for g in algo.optimizer.param_groups] == pytest.approx([0.02, 0.005, 5e-4])


def test_config_and_interface_errors_name_the_key() -> None:
    with pytest.raises(RLInputError, match=r"clip_eps = -0.1 is out of range; allowed: 0 < clip_eps < 1"):
        AlgoConfig(clip_eps=-0.1)
    with pytest.raises(RLInputError, match="trpo_delta = 0 is out of range"):
        AlgoConfig(trpo_delta=0)
    with pytest.raises(RLInputError, match=r"unknown algorithm key\(s\) \['clip'\]"):
        AlgoConfig.from_dict({"clip": 0.2})
    p = make_problem()
    with pytest.raises(RLInputError, match="algorithm = 'a2c' is not known"):
        make_algorithm("a2c", [{"params": [p.theta]}], [p.vtable])
    with pytest.raises(RLInputError, match="both policy_params and value_params"):
        make_algorithm("ppo", [{"params": [p.theta]}], [p.theta])
    algo = _algo("ppo", p)
    with pytest.raises(RLInputError, match="evaluate returned scores of shape"):
        algo.update(lambda mb: (torch.zeros(len(mb), 99), torch.zeros(len(mb))), p.rollout)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trpo_step_keeps_kl_within_delta_and_improves_the_surrogate(seed: int) -> None:
    p = make_problem(seed)
    algo = _algo("trpo", p, trpo_delta=0.01, ent_coef_start=0.0, ent_coef_end=0.0, kl_coef=0.0)
    old = p.objective()
    p.calls.clear()
    metrics = algo.update(p.evaluate, p.rollout)
    calls = list(p.calls)
    kl = p.kl_old_new()
    assert metrics["trpo/accepted"] == 1.0
    assert 0.001 < kl <= 0.01 * (1 + 1e-3)
    assert metrics["policy/kl_old_new"] == pytest.approx(kl, rel=1e-4)
    assert p.objective() > old
    # 4 gradient minibatches + 1 Fisher batch (grad), tries x 4 forward-only, 5 value epochs x 4.
    grad_calls = [n for n, grad in calls if grad]
    no_grad_calls = [n for n, grad in calls if not grad]
    assert len(grad_calls) == 4 + 1 + 5 * 4 and len(no_grad_calls) % 4 == 0
    assert len(no_grad_calls) == 4 * (metrics["trpo/backtracks"] + 1)
    assert set(METRIC_KEYS) < set(metrics)


def test_trpo_restores_the_policy_when_no_step_passes() -> None:
    p = make_problem()
    algo = _algo("trpo", p, backtrack_iters=3)
    before = p.theta.detach().clone()
    real = p.evaluate

    def evaluate(mb: Minibatch) -> tuple[Tensor, Tensor]:
        scores, values = real(mb)
        return (scores * math.nan if not torch.is_grad_enabled() else scores), values

    metrics = algo.update(evaluate, p.rollout)
    assert metrics["trpo/accepted"] == 0.0 and metrics["trpo/backtracks"] == 3.0
    assert torch.equal(p.theta.detach(), before)


def test_line_search_rejects_steps_that_break_the_bound() -> None:
    # KL grows as 4 delta frac^2: the full step (KL 4 delta) and nothing above frac 0.5 may pass.
    tried: list[float] = []

    def try_step(frac: float) -> tuple[float, float]:
        tried.append(frac)
        return 1.0 + frac, 4 * 0.01 * frac ** 2

    assert line_search(try_step, 1.0, 0.01, 10, 0.5) == (True, 0.5, 1)
    assert tried == [1.0, 0.5]
    # A step that never improves the objective is never taken.
    assert line_search(lambda f: (0.5, 0.0), 1.0, 0.01, 4, 0.5) == (False, 0.0, 4)


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_critic_free_algorithms_improve_and_leave_the_value_head_alone(name) -> None:
    """GRPO and RLOO: PPO's clipped step on group-baseline advantages; no critic is trained."""
    p = make_problem()
    groups = torch.arange(100) % 25  # four episodes per world seed
    f = {k: getattr(p.rollout, k) for k in ("logp", "ref_logp", "mask", "actions", "values", "rewards",
                                            "terminated", "truncated", "episode_id", "handles")}
    p.rollout = Rollout.from_tensors(**f, group_id=groups)
    algo = _algo(name, p, lr=0.01, target_kl=10.0)
    assert algo.advantage_estimator == {"grpo": "group", "rloo": "loo"}[name]
    p.rollout.compute_advantages(0.99, 0.95, normalize=False, estimator=algo.advantage_estimator)
    before, v_before = p.objective(), p.vtable.detach().clone()
    algo.update(p.evaluate, p.rollout)
    assert p.objective() > before + 0.05
    assert torch.equal(p.vtable.detach(), v_before)
