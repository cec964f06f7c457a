"""The update algorithms behind one interface: ``algo.update(evaluate, rollout) -> metrics``.

``evaluate(mb: Minibatch) -> (scores [B, C], values [B])`` recomputes the coordinator's unnormalised
candidate scores and values *with gradients* for the decisions of ``mb`` (scores of ``mb.mask.shape``);
this module applies the masked log-softmax. Evaluate calls are expensive (an LLM forward + backward),
so PPO and PG call it exactly once per minibatch per epoch.

- ``ppo``: clipped surrogate + clipped value loss + entropy bonus - KL(ref || new) penalty; AdamW with
  warmup + cosine LR; grad-norm clip; the update stops at the first minibatch whose exact KL(old || new),
  measured in its forward pass, exceeds ``early_stop_factor * target_kl`` (that step is not taken; as in
  Stable-Baselines3's PPO). ``optim/epochs_run`` counts the steps taken, in epochs (1.5: half-way
  through the second).
- ``pg``: the same loop with no ratio clip, no KL penalty and no early stop (the unstable baseline).
- ``trpo``: see ``teamtr.rl.trpo``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from teamtr.rl.errors import RLInputError
from teamtr.rl.kl import make_kl_controller
from teamtr.rl.losses import (PolicyTerms, clipped_value_loss, explained_variance, masked_log_softmax, merge_terms,
                             policy_terms)
from teamtr.rl.rollout import Minibatch, Rollout
from teamtr.rl.schedules import linear_decay, warmup_cosine
from teamtr.rl.settings import AlgoConfig

Evaluate = Callable[[Minibatch], tuple[Tensor, Tensor]]
#: An extra loss added at every PPO/PG step, with its metrics (the trainer's replay of successes).
Auxiliary = Callable[[], tuple[Tensor, dict[str, float]]]

def param_groups(policy_params: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalise ``[{"params": [...], "lr_scale": s}, ...]`` (lr_scale defaults to 1)."""
    groups = []
    for i, g in enumerate(policy_params):
        if not isinstance(g, dict) or "params" not in g:
            raise RLInputError(f"policy_params[{i}] must be a dict with 'params' (and 'lr_scale').")
        scale = float(g.get("lr_scale", 1.0))
        if not scale > 0:
            raise RLInputError(f"policy_params[{i}]['lr_scale'] = {scale!r}; allowed: > 0.")
        groups.append({"params": list(g["params"]), "lr_scale": scale})
    return groups


#: Keys every algorithm returns (TRPO adds trpo/step_size, trpo/backtracks, trpo/accepted).
#: optim/grad_norm is the policy tensors' norm before clipping; value/grad_norm the value head's.
METRIC_KEYS = ("policy/kl_old_new", "policy/kl_ref_new", "policy/entropy", "policy/clip_frac",
               "policy/ratio_min", "policy/ratio_max", "policy/loss", "value/loss",
               "value/explained_variance", "value/grad_norm", "optim/grad_norm", "optim/lr",
               "optim/ent_coef", "optim/kl_coef", "optim/skipped_steps", "optim/epochs_run")


def summarise(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per-minibatch rows -> one row: mean, except ratio_min/max (min/max); nan when no rows."""
    out = {k: float("nan") for k in METRIC_KEYS}
    for k in (rows[0] if rows else {}):
        xs = [r[k] for r in rows]
        out[k] = min(xs) if k == "policy/ratio_min" else max(xs) if k == "policy/ratio_max" \
            else sum(xs) / len(xs)
    return out


def step_row(t: PolicyTerms, v_loss: Tensor, norms: tuple[Tensor, Tensor]) -> dict[str, float]:
    """The metrics row of one optimiser step (policy terms, value loss, gradient norms)."""
    return {"policy/kl_old_new": float(t.kl_old_new), "policy/kl_ref_new": float(t.kl_ref_new),
            "policy/entropy": float(t.entropy), "policy/clip_frac": float(t.clip_frac),
            "policy/ratio_min": float(t.ratio_min), "policy/ratio_max": float(t.ratio_max),
            "policy/loss": float(-t.surrogate), "value/loss": v_loss.item(),
            "optim/grad_norm": float(norms[0]), "value/grad_norm": float(norms[1])}


@dataclass
class EpochLog:
    """What one epoch of PPO/PG saw: a metrics row, values and returns per step taken."""

    rows: list[dict[str, float]] = field(default_factory=list)
    values: list[Tensor] = field(default_factory=list)  # [B] per step, detached
    returns: list[Tensor] = field(default_factory=list)  # [B] per step
    skipped: int = 0  # minibatches whose loss or gradient was not finite
    stopped: bool = False  # the KL early stop fired


class Algorithm:
    """Shared state of every algorithm: schedules, KL controller, shuffling RNG, checkpointing."""

    name = "base"
    #: True when ``update`` differentiates the evaluate function twice (TRPO's Fisher-vector products):
    #: the caller must then make it twice differentiable (for a coordinator, the math attention kernel).
    needs_double_backward = False
    #: ``gae`` (the value head's baseline), or ``group``/``loo`` for critic-free algorithms (GRPO, RLOO):
    #: ``Rollout.compute_advantages(estimator=...)``; those need episodes grouped by world seed.
    advantage_estimator = "gae"

    def __init__(self, policy_params: Sequence[dict[str, Any]], value_params: Iterable[Tensor],
                 config: AlgoConfig) -> None:
        self.config = config
        self.groups = param_groups(policy_params)
        self.policy_tensors = [p for g in self.groups for p in g["params"]]
        self.value_tensors = list(value_params)
        if not self.policy_tensors:
            raise RLInputError("policy_params holds no tensors; pass the trainable policy weights.")
        shared = {id(p) for p in self.policy_tensors} & {id(p) for p in self.value_tensors}
        if shared:
            raise RLInputError(f"{len(shared)} tensor(s) are in both policy_params and value_params;"
                               " give each tensor to one side only.")
        self.kl = make_kl_controller(config.kl_control, config.kl_coef, config.target_kl,
                                     config.kl_horizon)
        self.updates_done = 0
        #: the update at which the schedules (LR warmup + cosine, entropy decay) last (re)started, and
        #: how many updates they span from there (None: ``config.total_updates``); ``restart_schedules``
        self.schedule_origin = 0
        self.schedule_span: int | None = None
        #: the policy's LR over ``config.lr`` (a curriculum stage's own ``lr``; the trainer sets it as each
        #: stage begins, and on resume from the stage the checkpoint is in); the value head's LR keeps 1
        self.stage_lr_scale = 1.0
        self.generator = torch.Generator().manual_seed(config.seed)

    def restart_schedules(self, span: int) -> None:
        """Run the LR warmup + cosine and the entropy decay again from the next update, over ``span``
        updates (a curriculum with ``schedule: stage`` calls this as each stage begins)."""
        if int(span) < 1:
            raise RLInputError(f"restart_schedules(span={span!r}): the schedules must span at least one update.")
        self.schedule_origin, self.schedule_span = self.updates_done, int(span)

    def _schedule_position(self) -> tuple[int, int]:
        """(updates since the schedules started, updates they span)."""
        return self.updates_done - self.schedule_origin, self.schedule_span or self.config.total_updates

    @property
    def ent_coef(self) -> float:
        c = self.config
        step, span = self._schedule_position()
        return linear_decay(step, c.ent_coef_start, c.ent_coef_end, span)

    @property
    def lr_multiplier(self) -> float:
        c = self.config
        step, span = self._schedule_position()
        return warmup_cosine(step, c.warmup_updates, span, c.min_lr_ratio)

    def _prepare(self, rollout: Rollout) -> None:
        if rollout.advantages is None:
            c = self.config
            rollout.compute_advantages(c.gamma, c.lam, c.normalize_advantages)

    @staticmethod
    def _evaluate(evaluate: Evaluate, mb: Minibatch) -> tuple[Tensor, Tensor, Minibatch]:
        """``evaluate(mb)`` with its shapes checked, and ``mb`` moved to the scores' device."""
        scores, values = evaluate(mb)
        if scores.shape != mb.mask.shape:
            raise RLInputError(f"evaluate returned scores of shape {tuple(scores.shape)}; expected "
                               f"{tuple(mb.mask.shape)} (the minibatch's mask shape).")
        if values.shape != (len(mb),):
            raise RLInputError(f"evaluate returned values of shape {tuple(values.shape)}; "
                               f"expected [{len(mb)}].")
        return scores, values, mb.to(scores.device)

    def update(self, evaluate: Evaluate, rollout: Rollout) -> dict[str, float]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """A snapshot as a plain dict of tensors and numbers (update count, KL controller, RNG...)."""
        return {"updates_done": self.updates_done, "kl_controller": self.kl.state_dict(),
                "generator": self.generator.get_state(), "schedule_origin": self.schedule_origin,
                "schedule_span": self.schedule_span}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates_done = int(state["updates_done"])
        # checkpoints written before schedules could restart have neither key: one schedule for the run
        self.schedule_origin = int(state.get("schedule_origin", 0))
        span = state.get("schedule_span")
        self.schedule_span = None if span is None else int(span)
        self.kl.load_state_dict(state["kl_controller"])
        self.generator.set_state(state["generator"])


def set_learning_rates(optimizer: torch.optim.Optimizer, mult: float, policy_scale: float = 1.0) -> None:
    """Each group's LR for this update: its base LR x the schedule's ``mult``, and the policy's groups
    (``"policy": True``) x ``policy_scale`` as well (a curriculum stage's own LR)."""
    for g in optimizer.param_groups:
        g["lr"] = g["base_lr"] * mult * (policy_scale if g.get("policy", True) else 1.0)


def run_epochs(epochs: int, minibatches: Callable[[], list[Any]],
               run_epoch: Callable[[list[Any]], EpochLog]) -> dict[str, float]:
    """Up to ``epochs`` passes (fresh minibatches each), stopping after an epoch that hit the KL limit;
    the metrics of the last epoch that ran a step, with the skipped-step count and the epochs run
    (steps over minibatches per epoch)."""
    skipped, steps, per_epoch, last = 0, 0, 1, EpochLog()
    for _ in range(epochs):
        batches = minibatches()
        per_epoch = max(len(batches), 1)
        epoch = run_epoch(batches)
        skipped, steps = skipped + epoch.skipped, steps + len(epoch.rows)
        if epoch.rows or not last.rows:
            last = epoch
        if epoch.stopped:
            break
    metrics = summarise(last.rows)
    metrics["value/explained_variance"] = (explained_variance(torch.cat(last.values), torch.cat(last.returns))
                                           if last.values else float("nan"))
    metrics.update({"optim/skipped_steps": float(skipped), "optim/epochs_run": steps / per_epoch})
    return metrics


class PPO(Algorithm):
    """Proximal policy optimisation over exact candidate distributions (see the module docstring)."""

    name = "ppo"
    clip = True  # the ratio clip, the KL penalty and the early stop (off in PolicyGradient)
    auxiliary: Auxiliary | None = None

    def __init__(self, policy_params: Sequence[dict[str, Any]], value_params: Iterable[Tensor],
                 config: AlgoConfig) -> None:
        super().__init__(policy_params, value_params, config)
        groups = [{"params": g["params"], "lr": config.lr * g["lr_scale"],
                   "base_lr": config.lr * g["lr_scale"], "policy": True} for g in self.groups]
        if self.value_tensors:
            groups.append({"params": self.value_tensors, "lr": config.value_lr,
                           "base_lr": config.value_lr, "policy": False})
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)

    def update(self, evaluate: Evaluate, rollout: Rollout) -> dict[str, float]:
        """Epochs x minibatches of the PPO loss; returns the metrics of the last epoch run."""
        c = self.config
        self._prepare(rollout)
        mult, ent_coef = self.lr_multiplier, self.ent_coef
        kl_coef = self.kl.value if self.clip else 0.0
        set_learning_rates(self.optimizer, mult, self.stage_lr_scale)
        kl_limit = (c.early_stop_factor * c.target_kl if self.clip and c.early_stop_factor is not None
                    else math.inf)
        metrics = run_epochs(c.epochs, lambda: list(rollout.minibatches(c.minibatch_size, self.generator)),
                             lambda batches: self._epoch(evaluate, batches, ent_coef, kl_coef, kl_limit))
        metrics.update({"optim/lr": c.lr * mult * self.stage_lr_scale, "optim/ent_coef": ent_coef,
                        "optim/kl_coef": kl_coef})
        if self.clip and math.isfinite(metrics["policy/kl_ref_new"]):
            self.kl.update(metrics["policy/kl_ref_new"], len(rollout))
        self.updates_done += 1
        return metrics

    def _epoch(self, evaluate: Evaluate, batches: list[Minibatch], ent_coef: float, kl_coef: float,
               kl_limit: float) -> EpochLog:
        """One pass over ``batches``: per minibatch one evaluate call and (at most) one step. Stops
        at the first minibatch whose KL(old || new) exceeds ``kl_limit``, before stepping on it."""
        c, log = self.config, EpochLog()
        for mb in batches:
            if c.micro_batch_size is not None and len(mb) > c.micro_batch_size:
                if not self._accumulated_step(evaluate, mb, ent_coef, kl_coef, kl_limit, log):
                    break
                continue
            scores, values, mb = self._evaluate(evaluate, mb)
            t = policy_terms(masked_log_softmax(scores, mb.mask), mb.logp, mb.ref_logp,
                             mb.mask, mb.actions, mb.advantages,
                             clip_eps=c.clip_eps if self.clip else None,
                             ent_coef=ent_coef, kl_coef=kl_coef, report_clip_eps=c.clip_eps)
            if float(t.kl_old_new) > kl_limit:  # out of the trust region already: no further step
                log.stopped = True
                break
            v_loss = clipped_value_loss(values, mb.values, mb.returns,
                                        c.value_clip if self.clip else None)
            vf_coef = c.vf_coef if self.advantage_estimator == "gae" else 0.0  # no critic to train
            aux, aux_log = self.auxiliary() if self.auxiliary is not None else (0.0, {})
            norms = self._step(-t.objective + vf_coef * v_loss + aux)
            if norms is None:
                log.skipped += 1
                continue
            log.values.append(values.detach())
            log.returns.append(mb.returns)
            log.rows.append({**step_row(t, v_loss, norms), **aux_log})
        return log

    def _accumulated_step(self, evaluate: Evaluate, mb: Minibatch, ent_coef: float, kl_coef: float,
                          kl_limit: float, log: EpochLog) -> bool:
        """``_epoch``'s step on ``mb`` in chunks of ``micro_batch_size`` decisions: each chunk's loss,
        weighted by its share of the minibatch, is backpropagated before the next chunk is evaluated,
        so the gradient is the whole minibatch's and the memory one chunk's. The KL early stop reads
        the whole minibatch's KL(old || new), known only after the last chunk: past the limit, the
        accumulated gradient is dropped and no step is taken (as without chunks). False: stop."""
        c = self.config
        vf_coef = c.vf_coef if self.advantage_estimator == "gae" else 0.0
        self.optimizer.zero_grad(set_to_none=True)
        parts: list[tuple[float, PolicyTerms, Tensor]] = []
        values, returns, finite = [], [], True
        for chunk in mb.split(c.micro_batch_size or len(mb)):
            scores, v, chunk = self._evaluate(evaluate, chunk)
            t = policy_terms(masked_log_softmax(scores, chunk.mask), chunk.logp, chunk.ref_logp, chunk.mask,
                             chunk.actions, chunk.advantages, clip_eps=c.clip_eps if self.clip else None,
                             ent_coef=ent_coef, kl_coef=kl_coef, report_clip_eps=c.clip_eps)
            v_loss = clipped_value_loss(v, chunk.values, chunk.returns, c.value_clip if self.clip else None)
            weight = len(chunk) / len(mb)
            loss = (-t.objective + vf_coef * v_loss) * weight
            finite = finite and bool(torch.isfinite(loss))
            if finite:
                loss.backward()
            parts.append((weight, t, v_loss.detach()))
            values.append(v.detach())
            returns.append(chunk.returns)
        t = merge_terms([(w, pt) for w, pt, _ in parts])
        if float(t.kl_old_new) > kl_limit:  # out of the trust region already: no step
            self.optimizer.zero_grad(set_to_none=True)
            log.stopped = True
            return False
        aux, aux_log = self.auxiliary() if self.auxiliary is not None else (torch.zeros(()), {})
        norms = None
        if finite and torch.isfinite(aux):
            if aux.requires_grad:
                aux.backward()
            norms = self._clip_and_step()
        if norms is None:
            self.optimizer.zero_grad(set_to_none=True)
            log.skipped += 1
            return True
        v_loss = sum(w * vl for w, _, vl in parts)
        log.values.append(torch.cat(values))
        log.returns.append(torch.cat(returns))
        log.rows.append({**step_row(t, v_loss, norms), **aux_log})  # type: ignore[arg-type]
        return True

    def _step(self, loss: Tensor) -> tuple[Tensor, Tensor] | None:
        """One optimiser step on ``loss``: the policy's and the value head's gradient norms (before
        clipping), or None (no step) when the loss or a gradient is not finite."""
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            return None
        loss.backward()
        return self._clip_and_step()

    def _clip_and_step(self) -> tuple[Tensor, Tensor] | None:
        """Clip the accumulated gradients and step: their norms before clipping, or None (gradients
        dropped, no step) when one is not finite."""
        max_norm = self.config.max_grad_norm if self.config.max_grad_norm is not None else math.inf
        # Clipped apart: a fresh value head's large gradient must not shrink the policy's.
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy_tensors, max_norm)
        value_norm = (torch.nn.utils.clip_grad_norm_(self.value_tensors, max_norm)
                      if self.value_tensors else torch.zeros(()))
        if not (torch.isfinite(grad_norm) and torch.isfinite(value_norm)):
            # A non-finite gradient must not reach Adam's moments either.
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.optimizer.step()
        return grad_norm, value_norm

    def state_dict(self) -> dict[str, Any]:
        # A snapshot: the optimiser's own state_dict aliases moment tensors later steps overwrite.
        return {**super().state_dict(), "optimizer": copy.deepcopy(self.optimizer.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.optimizer.load_state_dict(state["optimizer"])


class PolicyGradient(PPO):
    """Vanilla policy gradient: the unclipped surrogate ``-ratio * A`` (its gradient at ratio 1 is
    REINFORCE with the value baseline), no KL penalty, no early stop, plain value MSE."""

    name = "pg"
    clip = False


class GRPO(PPO):
    """PPO's clipped surrogate, KL penalty and early stop with group-normalised advantages instead of
    a critic (Shao et al. 2024): each episode's return against the mean and std of the episodes of
    its world seed. The value head is not trained (its loss is still logged)."""

    name = "grpo"
    advantage_estimator = "group"


class RLOO(PPO):
    """PPO's clipped surrogate with the REINFORCE leave-one-out baseline (Kool et al. 2019; Ahmadian et
    al. 2024): each episode's return minus the mean return of the other episodes of its world seed."""

    name = "rloo"
    advantage_estimator = "loo"
