"""TRPO (Schulman et al. 2015): the seed's hard trust region, mean KL(old || new) <= delta.

One update: (1) the gradient ``g`` of the surrogate objective at the current policy; (2) ``s`` solving
``(F + damping I) s = g`` by conjugate gradient, where ``F v`` is the Hessian-vector product of the
exact mean KL(current || new) at new = current (the Fisher matrix, obtained by differentiating the KL
twice); (3) the full step ``sqrt(2 delta / s^T F s) * s``; (4) a backtracking line search that accepts
the first shrunken step whose exact KL(old || new) <= delta and whose surrogate beats the old one,
else leaves the policy untouched; (5) the value head trained by its own Adam.

``evaluate`` is differentiated twice, so every op it runs needs a double backward; making it so (for
a coordinator: an attention implementation that has one) is the caller's job.

Per-group ``lr_scale`` has no meaning here (the trust region sets the step), so TRPO ignores it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from teamtr.rl.algorithms import Algorithm, Evaluate, summarise
from teamtr.rl.errors import RLInputError
from teamtr.rl.losses import (PolicyTerms, categorical_kl, clipped_value_loss, explained_variance,
                              masked_log_softmax, policy_terms)
from teamtr.rl.rollout import Minibatch, Rollout
from teamtr.rl.settings import AlgoConfig

#: (decisions in a minibatch, its policy terms): the line search and the metrics weight by size.
Row = tuple[int, PolicyTerms]


def flat_grad(output: Tensor, params: Sequence[Tensor], **kwargs: Any) -> Tensor:
    """``d output / d params`` as one float32 vector (zeros for params ``output`` does not use)."""
    grads = torch.autograd.grad(output, params, allow_unused=True, **kwargs)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1).float()
                      for g, p in zip(grads, params)])


def get_flat(params: Sequence[Tensor]) -> Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in params])


@torch.no_grad()
def set_flat(params: Sequence[Tensor], flat: Tensor) -> None:
    """Write a flat vector (as made by ``get_flat``) back into the tensors, in place."""
    offset = 0
    for p in params:
        n = p.numel()
        p.copy_(flat[offset:offset + n].view_as(p).to(p.dtype))
        offset += n


def conjugate_gradient(fvp: Callable[[Tensor], Tensor], b: Tensor, iters: int,
                       tol: float = 1e-10) -> Tensor:
    """Approximately solve ``A x = b`` for symmetric positive-definite ``A`` given ``v -> A v``."""
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()
    rr = r @ r
    for _ in range(iters):
        if rr <= tol:
            break
        ap = fvp(p)
        alpha = rr / (p @ ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def line_search(try_step: Callable[[float], tuple[float, float]], old_objective: float,
                delta: float, iters: int, ratio: float) -> tuple[bool, float, int]:
    """Backtracking: try fractions ``1, ratio, ratio^2, ...`` of the full step.

    ``try_step(frac) -> (objective, kl)`` applies that fraction and measures. A fraction is accepted
    when ``kl <= delta`` and ``objective > old_objective`` (both finite). Returns ``(accepted, frac,
    backtracks)``: the accepted fraction and how many shrinks preceded it (``iters`` if none passed;
    the caller restores the old parameters then).
    """
    for k in range(iters):
        frac = ratio ** k
        objective, kl = try_step(frac)
        if math.isfinite(objective) and math.isfinite(kl) and kl <= delta \
                and objective > old_objective:
            return True, frac, k
    return False, 0.0, iters


class TRPO(Algorithm):
    """Trust-region policy optimisation with a separately trained value head."""

    name = "trpo"
    needs_double_backward = True

    def __init__(self, policy_params: Sequence[dict[str, Any]], value_params: Iterable[Tensor],
                 config: AlgoConfig) -> None:
        super().__init__(policy_params, value_params, config)
        self.value_optimizer = (torch.optim.Adam(self.value_tensors, lr=config.value_lr)
                                if self.value_tensors else None)

    def _objective(self, scores: Tensor, mb: Minibatch, ent_coef: float, kl_coef: float) -> PolicyTerms:
        return policy_terms(masked_log_softmax(scores, mb.mask), mb.logp, mb.ref_logp, mb.mask,
                            mb.actions, mb.advantages, clip_eps=None, ent_coef=ent_coef,
                            kl_coef=kl_coef, report_clip_eps=self.config.clip_eps)

    def update(self, evaluate: Evaluate, rollout: Rollout) -> dict[str, float]:
        """One natural-gradient step inside the trust region, then the value head's epochs.

        ``evaluate`` is differentiated twice (Fisher-vector products): every op it runs must have a
        double backward; the caller wraps it in whatever makes that so.
        """
        c = self.config
        self._prepare(rollout)
        ent_coef, kl_coef = self.ent_coef, self.kl.value
        n = len(rollout)
        batches = list(rollout.minibatches(c.minibatch_size, self.generator))
        g, old_objective, old_rows = self._surrogate_gradient(evaluate, batches, n, ent_coef, kl_coef)
        step, step_size, finite = self._natural_step(evaluate, rollout, g)
        skipped = int(not finite)
        accepted, frac, backtracks, rows = self._line_search(
            evaluate, batches, n, step, old_objective, ent_coef, kl_coef)
        if not accepted:  # the policy stays the old one, and so do its diagnostics
            rows = old_rows
        value_metrics, value_skipped = self._value_epochs(evaluate, rollout)
        metrics = {**summarise([]), **self._policy_metrics(rows, n), **value_metrics}
        metrics.update({"optim/grad_norm": float(g.norm()), "optim/lr": c.value_lr,
                        "optim/ent_coef": ent_coef, "optim/kl_coef": kl_coef,
                        "optim/skipped_steps": float(skipped + value_skipped),
                        "optim/epochs_run": 1.0, "trpo/step_size": step_size * frac,
                        "trpo/backtracks": float(backtracks), "trpo/accepted": float(accepted)})
        if math.isfinite(metrics["policy/kl_ref_new"]):
            self.kl.update(metrics["policy/kl_ref_new"], n)
        self.updates_done += 1
        return metrics

    def _surrogate_gradient(self, evaluate: Evaluate, batches: list[Minibatch], n: int,
                            ent_coef: float, kl_coef: float) -> tuple[Tensor, float, list[Row]]:
        """``g``, the gradient of the objective over all ``n`` decisions, accumulated minibatch by
        minibatch (memory: one minibatch's graph), with the objective and each batch's terms."""
        params = self.policy_tensors
        g = torch.zeros_like(get_flat(params))
        objective, rows = 0.0, []
        for mb in batches:
            scores, _, mb = self._evaluate(evaluate, mb)
            t = self._objective(scores, mb, ent_coef, kl_coef)
            weight = len(mb) / n
            g += flat_grad(t.objective * weight, params)
            objective += t.objective.item() * weight
            # Detached: keeping the objective would keep every minibatch's graph alive.
            rows.append((len(mb), replace(t, objective=t.objective.detach())))
        return g, objective, rows

    def _fisher_product(self, evaluate: Evaluate, mb: Minibatch) -> Callable[[Tensor], Tensor]:
        """``v -> (F + damping I) v``: F the Hessian of the exact mean KL(current || new) at new =
        current over ``mb``, by differentiating the KL twice (one evaluate call)."""
        params, damping = self.policy_tensors, self.config.cg_damping
        scores, _, mb = self._evaluate(evaluate, mb)
        logp = masked_log_softmax(scores, mb.mask)
        kl = categorical_kl(logp.detach(), logp, mb.mask).mean()
        grad_kl = flat_grad(kl, params, create_graph=True)

        def fvp(v: Tensor) -> Tensor:
            try:
                return flat_grad(grad_kl @ v, params, retain_graph=True) + damping * v
            except RuntimeError as err:
                if "not implemented" not in str(err):
                    raise
                raise RLInputError(
                    "trpo differentiates the KL twice (Fisher-vector products), but an op in "
                    f"evaluate has no double backward ({err}); run the update inside "
                    "teamtr.policy.scoring.double_backward_attention() for a coordinator, or use "
                    "algo.name=ppo.") from None
        return fvp

    def _natural_step(self, evaluate: Evaluate, rollout: Rollout,
                      g: Tensor) -> tuple[Tensor | None, float, bool]:
        """``(step, step_size, finite)``: the full step ``sqrt(2 delta / s^T F s) * s`` with
        ``s = (F + damping I)^-1 g`` by conjugate gradient, F from a random subset of decisions;
        no step when g is 0 or the step would not be finite. The double-backward graph lives in
        ``fvp`` and is freed on return, before the line search."""
        c = self.config
        n = len(rollout)
        size = min(n, c.minibatch_size if c.fisher_batch_size is None else c.fisher_batch_size)
        fisher_mb = rollout.subset(torch.randperm(n, generator=self.generator)[:size])
        fvp = self._fisher_product(evaluate, fisher_mb)
        step, step_size = None, 0.0
        if torch.isfinite(g).all() and float(g.norm()) > 0:
            s = conjugate_gradient(fvp, g, c.cg_iters)
            # The step length uses the undamped Fisher, so the quadratic model predicts KL = delta.
            shs = float(s @ (fvp(s) - c.cg_damping * s))
            if math.isfinite(shs) and shs > 0:
                step_size = math.sqrt(2 * c.trpo_delta / shs)
                step = step_size * s
        finite = bool(torch.isfinite(g).all()) and (step is None or bool(torch.isfinite(step).all()))
        return (step if finite else None), step_size, finite

    def _line_search(self, evaluate: Evaluate, batches: list[Minibatch], n: int, step: Tensor | None,
                     old_objective: float, ent_coef: float, kl_coef: float
                     ) -> tuple[bool, float, int, list[Row]]:
        """Backtracking on ``step`` (forward only, every decision): ``(accepted, fraction, backtracks,
        the terms of the last try)``; the old parameters are restored when no try passes."""
        c, params = self.config, self.policy_tensors
        old_flat = get_flat(params)
        rows: list[Row] = []

        def try_step(frac: float) -> tuple[float, float]:
            set_flat(params, old_flat + frac * step)
            rows.clear()
            objective = 0.0
            with torch.no_grad():
                for mb in batches:
                    scores, _, mb = self._evaluate(evaluate, mb)
                    t = self._objective(scores, mb, ent_coef, kl_coef)
                    objective += float(t.objective) * len(mb) / n
                    rows.append((len(mb), t))
            return objective, sum(b * float(t.kl_old_new) for b, t in rows) / n

        accepted, frac, backtracks = False, 0.0, 0
        if step is not None:
            accepted, frac, backtracks = line_search(try_step, old_objective, c.trpo_delta,
                                                     c.backtrack_iters, c.backtrack_ratio)
        if not accepted:
            set_flat(params, old_flat)
        return accepted, frac, backtracks, rows

    def _value_epochs(self, evaluate: Evaluate, rollout: Rollout) -> tuple[dict[str, float], int]:
        """``value_epochs`` x minibatches of the value loss on the head's own Adam: the value
        metrics (loss and explained variance of the last epoch) and the steps skipped."""
        c, out, skipped = self.config, {}, 0
        if self.value_optimizer is None:
            return out, skipped
        for group in self.value_optimizer.param_groups:
            group["lr"] = c.value_lr
        max_norm = c.max_grad_norm if c.max_grad_norm is not None else math.inf
        losses, norms, values_seen, returns_seen = [], [], [], []
        for _ in range(c.value_epochs):
            values_seen, returns_seen = [], []
            for mb in rollout.minibatches(c.minibatch_size, self.generator):
                _, values, mb = self._evaluate(evaluate, mb)
                v_loss = clipped_value_loss(values, mb.values, mb.returns, c.value_clip)
                grads = (torch.autograd.grad(v_loss, self.value_tensors, allow_unused=True)
                         if torch.isfinite(v_loss) else None)
                if grads is None or not all(gr is None or torch.isfinite(gr).all() for gr in grads):
                    skipped += 1
                    continue
                for p, gr in zip(self.value_tensors, grads):
                    p.grad = gr
                norms.append(float(torch.nn.utils.clip_grad_norm_(self.value_tensors, max_norm)))
                self.value_optimizer.step()
                self.value_optimizer.zero_grad(set_to_none=True)
                losses.append(v_loss.item())
                values_seen.append(values.detach())
                returns_seen.append(mb.returns)
        if values_seen:
            out["value/loss"] = sum(losses[-len(values_seen):]) / len(values_seen)
            out["value/explained_variance"] = explained_variance(torch.cat(values_seen),
                                                                 torch.cat(returns_seen))
        if norms:
            out["value/grad_norm"] = sum(norms) / len(norms)
        return out, skipped

    @staticmethod
    def _policy_metrics(rows: list[Row], n: int) -> dict[str, float]:
        """Diagnostics of the policy kept: means weighted by minibatch size, ratio min/max."""
        out = {key: sum(b * float(getattr(t, key.split("/")[1])) for b, t in rows) / n
               for key in ("policy/kl_old_new", "policy/kl_ref_new", "policy/entropy",
                           "policy/clip_frac")}
        out["policy/loss"] = -sum(b * float(t.surrogate) for b, t in rows) / n
        out["policy/ratio_min"] = min(float(t.ratio_min) for _, t in rows)
        out["policy/ratio_max"] = max(float(t.ratio_max) for _, t in rows)
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.value_optimizer is not None:
            state["value_optimizer"] = copy.deepcopy(self.value_optimizer.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.value_optimizer is not None:
            self.value_optimizer.load_state_dict(state["value_optimizer"])
