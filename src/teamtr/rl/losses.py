"""Exact maths over categorical distributions on padded candidate sets, and the PPO loss terms.

Every coordinator decision chooses among a finite set of candidate directives, and states have
different candidate counts, so a batch of decisions is a padded ``[B, C]`` tensor with a boolean
``mask`` (True = a real candidate). Log-probs, entropy and KL are computed **exactly** over the
candidates, never estimated from samples. Padded entries hold 0 in every log-prob tensor made here and
never change a result: every function below reads them through the mask only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from teamtr.rl.errors import RLInputError

#: Log-ratios are clamped to +-LOG_RATIO_CLAMP before ``exp`` so one bad sample cannot overflow.
LOG_RATIO_CLAMP = 20.0


def check_mask(mask: Tensor, name: str = "mask") -> None:
    """Raise ``RLInputError`` unless ``mask`` is a ``[B, C]`` bool tensor with a True in every row."""
    if mask.dtype != torch.bool:
        raise RLInputError(f"{name} must be a bool tensor [B, C], got dtype {mask.dtype}.")
    if mask.dim() != 2:
        raise RLInputError(f"{name} must have shape [B, C], got {tuple(mask.shape)}.")
    empty = (~mask.any(dim=1)).nonzero().flatten()
    if empty.numel() > 0:
        rows = empty[:5].tolist()
        raise RLInputError(
            f"{name} has {empty.numel()} all-masked row(s) (first: {rows}); every decision needs at "
            "least one valid candidate."
        )


def check_same_shape(mask: Tensor, **tensors: Tensor) -> None:
    """Raise ``RLInputError`` unless every tensor has the shape of ``mask``."""
    for name, t in tensors.items():
        if t.shape != mask.shape:
            raise RLInputError(
                f"{name} has shape {tuple(t.shape)} but mask has {tuple(mask.shape)}; they must match."
            )


def masked_log_softmax(scores: Tensor, mask: Tensor, *, fill: float = 0.0) -> Tensor:
    """Log-probabilities over the valid candidates of each row.

    Args:
        scores: ``[B, C]`` unnormalised candidate logits (padded entries may hold anything, -inf too).
        mask: ``[B, C]`` bool, True for real candidates; every row needs one.
        fill: the value written into padded entries: 0 (the default) keeps sums and the maths of this
            module exact; ``-inf`` makes ``argmax``, ``exp`` and sampling ignore them.
    Returns:
        ``[B, C]`` log-probs; each row's valid entries log-sum-exp to 0, padded entries hold ``fill``.
    """
    check_mask(mask)
    check_same_shape(mask, scores=scores)
    # A finite fill instead of -inf keeps the backward pass free of inf - inf.
    logits = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.log_softmax(logits, dim=-1).masked_fill(~mask, fill)


def entropy(logp: Tensor, mask: Tensor) -> Tensor:
    """Exact entropy ``-sum_c p_c log p_c`` per row: ``[B, C] -> [B]`` (nats)."""
    check_same_shape(mask, logp=logp)
    plogp = torch.where(mask, logp.exp() * logp, torch.zeros_like(logp))
    # p log p -> 0 as p -> 0; an exactly-zero probability (logp = -inf) must not give nan.
    plogp = torch.nan_to_num(plogp, nan=0.0)
    return -plogp.sum(dim=-1)


def categorical_kl(logp_p: Tensor, logp_q: Tensor, mask: Tensor) -> Tensor:
    """Exact ``KL(p || q) = sum_c p_c (log p_c - log q_c)`` per row: ``[B, C] x2 -> [B]`` (nats).

    Gradients flow into both arguments; pass ``p`` detached for a KL to a fixed distribution.
    Candidates with ``p_c = 0`` contribute 0 whatever ``q_c`` is.
    """
    check_same_shape(mask, logp_p=logp_p, logp_q=logp_q)
    p = logp_p.exp()
    keep = mask & (p > 0)
    terms = torch.where(keep, p * (logp_p - logp_q), torch.zeros_like(p))
    return terms.sum(dim=-1)


def chosen(logp: Tensor, actions: Tensor) -> Tensor:
    """The log-prob of each row's chosen candidate: ``[B, C], [B] long -> [B]``."""
    if actions.shape != logp.shape[:1]:
        raise RLInputError(
            f"actions has shape {tuple(actions.shape)}; expected [{logp.shape[0]}] (one per row)."
        )
    return logp.gather(1, actions.long().unsqueeze(1)).squeeze(1)


def clipped_surrogate(ratio: Tensor, advantages: Tensor, clip_eps: float | None) -> Tensor:
    """PPO's clipped surrogate *loss* per decision: ``-min(r A, clip(r, 1-eps, 1+eps) A)``, ``[B]``.

    ``clip_eps=None`` gives the unclipped importance-weighted policy-gradient loss ``-r A``.
    """
    unclipped = ratio * advantages
    if clip_eps is None:
        return -unclipped
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return -torch.minimum(unclipped, clipped)


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, value_clip: float | None
) -> Tensor:
    """Scalar value loss ``0.5 * mean(max((V - R)^2, (V_clip - R)^2))``.

    ``V_clip = V_old + clip(V - V_old, -value_clip, value_clip)``; ``value_clip=None`` gives plain
    ``0.5 * mean((V - R)^2)``. All inputs ``[B]``.
    """
    loss = (values - returns) ** 2
    if value_clip is not None:
        v_clip = old_values + (values - old_values).clamp(-value_clip, value_clip)
        loss = torch.maximum(loss, (v_clip - returns) ** 2)
    return 0.5 * loss.mean()


def explained_variance(values: Tensor, returns: Tensor) -> float:
    """``1 - Var(R - V) / Var(R)``: 1 is perfect, 0 is no better than a constant; nan if Var(R) = 0."""
    var_r = returns.float().var(unbiased=False)
    if var_r.item() == 0.0:
        return float("nan")
    return float(1.0 - (returns.float() - values.float()).var(unbiased=False) / var_r)


@dataclass
class PolicyTerms:
    """The policy side of the loss for one batch, with its diagnostics.

    ``objective`` is the quantity to *maximise* (surrogate + entropy bonus - KL penalty); the
    diagnostics are detached scalars.
    """

    objective: Tensor
    surrogate: Tensor
    entropy: Tensor
    kl_ref_new: Tensor
    kl_old_new: Tensor
    clip_frac: Tensor
    ratio_min: Tensor
    ratio_max: Tensor


def policy_terms(
    new_logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    actions: Tensor,
    advantages: Tensor,
    *,
    clip_eps: float | None,
    ent_coef: float,
    kl_coef: float,
    report_clip_eps: float = 0.2,
) -> PolicyTerms:
    """Clipped surrogate + entropy bonus - ``kl_coef`` * KL(ref || new), all means over decisions.

    Args:
        new_logp, old_logp, ref_logp: ``[B, C]`` log-probs of the policy being trained, the acting
            policy and the frozen reference (from ``masked_log_softmax``).
        mask: ``[B, C]`` bool; actions ``[B]`` long; advantages ``[B]``.
        clip_eps: PPO clip range, or None for the unclipped surrogate (vanilla policy gradient).
        report_clip_eps: the range ``clip_frac`` is measured against when ``clip_eps`` is None.
    """
    check_same_shape(mask, new_logp=new_logp, old_logp=old_logp, ref_logp=ref_logp)
    if advantages.shape != actions.shape:
        raise RLInputError(
            f"advantages has shape {tuple(advantages.shape)} but actions has {tuple(actions.shape)}."
        )
    log_ratio = (chosen(new_logp, actions) - chosen(old_logp, actions)).clamp(
        -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP
    )
    ratio = log_ratio.exp()
    surrogate = -clipped_surrogate(ratio, advantages, clip_eps).mean()
    ent = entropy(new_logp, mask).mean()
    kl_ref = categorical_kl(ref_logp.detach(), new_logp, mask).mean()
    objective = surrogate + ent_coef * ent - kl_coef * kl_ref
    eps = report_clip_eps if clip_eps is None else clip_eps
    with torch.no_grad():
        kl_old = categorical_kl(old_logp, new_logp, mask).mean()
        clip_frac = ((ratio - 1.0).abs() > eps).float().mean()
    return PolicyTerms(
        objective=objective,
        surrogate=surrogate.detach(),
        entropy=ent.detach(),
        kl_ref_new=kl_ref.detach(),
        kl_old_new=kl_old,
        clip_frac=clip_frac,
        ratio_min=ratio.detach().min(),
        ratio_max=ratio.detach().max(),
    )


def merge_terms(parts: Sequence[tuple[float, PolicyTerms]]) -> PolicyTerms:
    """The terms of a batch from those of its chunks, each with its share of the batch (weights
    summing to 1): weighted means of the means, the extremes of the ratio's extremes. Detached."""
    if not parts:
        raise RLInputError("merge_terms() got no chunks.")

    def mean(name: str) -> Tensor:
        return sum(w * getattr(t, name).detach() for w, t in parts)  # type: ignore[return-value]

    return PolicyTerms(
        objective=mean("objective"), surrogate=mean("surrogate"), entropy=mean("entropy"),
        kl_ref_new=mean("kl_ref_new"), kl_old_new=mean("kl_old_new"), clip_frac=mean("clip_frac"),
        ratio_min=torch.stack([t.ratio_min for _, t in parts]).min(),
        ratio_max=torch.stack([t.ratio_max for _, t in parts]).max(),
    )


def imitation_nll(logp: Tensor, actions: Tensor, weights: Tensor | None = None) -> Tensor:
    """Weighted mean negative log-likelihood of ``actions``: ``[B, C], [B] long (, [B]) -> scalar``.

    The imitation term of replayed successes (``train/replay.py``) and of behaviour cloning;
    ``weights`` (default 1) need not sum to 1: the mean is ``sum(w * nll) / sum(w)``.
    """
    nll = -chosen(logp, actions)
    if weights is None:
        return nll.mean()
    if weights.shape != nll.shape:
        raise RLInputError(f"weights has shape {tuple(weights.shape)}; expected {tuple(nll.shape)} (one per row).")
    return (weights * nll).sum() / weights.sum()


def token_policy_terms(
    new_logp: Tensor,
    old_logp: Tensor,
    new_branch: Tensor,
    old_branch: Tensor,
    ref_branch: Tensor,
    valid: Tensor,
    branching: Tensor,
    advantages: Tensor,
    *,
    clip_eps: float | None,
    ent_coef: float,
    kl_coef: float,
    token_level: bool = True,
    report_clip_eps: float = 0.2,
) -> PolicyTerms:
    """``policy_terms`` for outputs decoded token by token under a grammar's mask (whole-team directives).

    B decisions, T output tokens, K the most valid tokens at one position. Only *branching* tokens
    (where the grammar allowed more than one token) carry probability; forced tokens have log-prob 0
    under every policy and are left out of every mean.

    Args:
        new_logp, old_logp: ``[B, T]`` the taken tokens' log-probs (0 at forced tokens and padding).
        new_branch, old_branch, ref_branch: ``[B, T, K]`` the whole masked next-token distributions
            (log-probs; anything at invalid entries), so that entropy and KL are exact per token.
        valid: ``[B, T, K]`` bool, the grammar's valid tokens; branching: ``[B, T]`` bool.
        advantages: ``[B]``, one per decision (GAE over decisions).
        token_level: True: a ratio and a clip per branching token, the surrogate averaged over the
            batch's branching tokens; False: one ratio per decision, ``exp(sum_t log-ratio_t)``.
    Entropy and both KLs are exact per token, averaged over branching tokens (summed over an output:
    the chain-rule decomposition of the sequence's entropy and KL along that output).
    """
    if branching.shape != new_logp.shape or valid.shape[:2] != new_logp.shape:
        raise RLInputError(f"branching {tuple(branching.shape)} and valid {tuple(valid.shape)} must match the "
                           f"token log-probs {tuple(new_logp.shape)} (valid with a last dim K).")
    at, n = branching.bool(), branching.sum().clamp(min=1)
    ok = valid[at]  # invalid entries hold -inf: zeroed (with their gradient) before any p log p
    new_b, old_b, ref_b = (x[at].masked_fill(~ok, 0.0) for x in (new_branch, old_branch, ref_branch))
    log_ratio = ((new_logp - old_logp) * at).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if token_level:
        ratio = log_ratio.exp()
        surr = -clipped_surrogate(ratio, advantages[:, None].expand_as(ratio), clip_eps)
        surrogate = (surr * at).sum() / n
        ratio_seen = ratio[at] if at.any() else ratio.new_ones(1)
    else:
        ratio = log_ratio.sum(-1).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        surrogate = -clipped_surrogate(ratio, advantages, clip_eps).mean()
        ratio_seen = ratio
    ent = entropy(new_b, ok).sum() / n
    kl_ref = categorical_kl(ref_b.detach(), new_b, ok).sum() / n
    objective = surrogate + ent_coef * ent - kl_coef * kl_ref
    eps = report_clip_eps if clip_eps is None else clip_eps
    with torch.no_grad():
        kl_old = categorical_kl(old_b, new_b, ok).sum() / n
        clip_frac = ((ratio_seen - 1.0).abs() > eps).float().mean()
    return PolicyTerms(objective=objective, surrogate=surrogate.detach(), entropy=ent.detach(),
                       kl_ref_new=kl_ref.detach(), kl_old_new=kl_old, clip_frac=clip_frac,
                       ratio_min=ratio_seen.detach().min(), ratio_max=ratio_seen.detach().max())
