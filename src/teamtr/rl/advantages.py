"""Generalised advantage estimation over many interleaved episodes in one flat batch.

Decisions arrive as batched appends of many teams' ticks, so an episode's decisions are not
contiguous; within one ``episode_id`` the storage order is the time order. GAE (Schulman et al. 2016):
``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)`` and ``A_t = delta_t + gamma * lam * A_{t+1}``, with
``V(s_{T})`` = 0 after a termination and the stored bootstrap value after a truncation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from teamtr.rl.errors import RLInputError


def _check_unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise RLInputError(f"{name} = {value!r} is out of range; allowed: 0 <= {name} <= 1.")


def gae(
    rewards: Tensor,
    values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    bootstrap_values: Tensor,
    episode_id: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Advantages and returns for a flat batch of decisions from many episodes.

    Args:
        rewards, values, bootstrap_values: ``[N]`` float. ``bootstrap_values[i]`` is V of the state
            after decision ``i`` and is read only where ``truncated[i]``.
        terminated, truncated: ``[N]`` bool. The last stored decision of every episode must carry one
            of them (a rollout cut mid-episode is a truncation); no earlier decision may. When both
            are set, termination wins (no bootstrap).
        episode_id: ``[N]`` long; decisions of one episode are in time order.
        gamma, lam: discount and GAE lambda, both in [0, 1].
    Returns:
        ``(advantages, returns)``, both ``[N]`` float32 in the input order; ``returns = advantages +
        values`` (the value targets).
    """
    _check_unit("gamma", gamma)
    _check_unit("lam", lam)
    n = _check_shapes(rewards, values=values, terminated=terminated, truncated=truncated,
                      bootstrap_values=bootstrap_values, episode_id=episode_id)
    if n == 0:
        empty = torch.zeros(0, dtype=torch.float32)
        return empty, empty.clone()
    # A stable sort keeps each episode's decisions in storage (= time) order.
    order = torch.argsort(episode_id, stable=True)
    last = _episode_ends(order, episode_id, terminated, truncated)

    # V(s_{t+1}): the episode's next value; the bootstrap after a truncation, 0 after a termination.
    v = values[order].double()
    next_v = torch.empty_like(v)
    next_v[:-1] = v[1:]
    next_v = torch.where(last, bootstrap_values[order].double(), next_v)
    next_v = torch.where(terminated[order], torch.zeros_like(next_v), next_v)
    delta = (rewards[order].double() + gamma * next_v - v).tolist()
    carry = (~last).tolist()
    # The recursion is inherently sequential; a Python loop over floats is fast for N ~ 1e5.
    adv_sorted = [0.0] * n
    running = 0.0
    for i in range(n - 1, -1, -1):
        running = delta[i] + (gamma * lam * running if carry[i] else 0.0)
        adv_sorted[i] = running
    advantages = torch.empty(n, dtype=torch.float64)
    advantages[order] = torch.tensor(adv_sorted, dtype=torch.float64)
    returns = advantages + values.double()
    return advantages.float(), returns.float()


def _check_shapes(rewards: Tensor, **tensors: Tensor) -> int:
    """N, the decisions of ``rewards`` [N]; ``RLInputError`` unless every tensor is ``[N]``."""
    n = rewards.shape[0]
    for name, t in tensors.items():
        if t.shape != (n,):
            raise RLInputError(f"{name} has shape {tuple(t.shape)}; expected [{n}] like rewards.")
    return n


def _episode_ends(order: Tensor, episode_id: Tensor, terminated: Tensor, truncated: Tensor) -> Tensor:
    """``[N]`` bool in ``order`` (decisions sorted by episode, time within): True at the last
    decision of each episode. ``RLInputError`` unless exactly those carry terminated/truncated."""
    ep = episode_id[order]
    done = terminated[order] | truncated[order]
    last = torch.ones(len(order), dtype=torch.bool)
    last[:-1] = ep[1:] != ep[:-1]
    problems = (
        (done & ~last, "decision {i} of episode {e} is marked terminated/truncated but the episode "
                       "has later decisions; give each new episode its own episode_id."),
        (last & ~done, "episode {e} ends at decision {i} with neither terminated nor truncated; mark "
                       "a rollout cut mid-episode as truncated and give bootstrap_values."),
    )
    for where, message in problems:
        found = where.nonzero().flatten()
        if found.numel() > 0:
            i = int(order[found[0]])
            raise RLInputError(message.format(i=i, e=int(episode_id[i])))
    return last


def normalize(advantages: Tensor, eps: float = 1e-8) -> Tensor:
    """Zero-mean, unit-std advantages (population std); a single decision is only centred."""
    centred = advantages - advantages.mean()
    if advantages.numel() < 2:
        return centred
    return centred / (advantages.std(unbiased=False) + eps)


#: Critic-free advantage estimators over groups of episodes that share a world seed.
GROUP_ESTIMATORS = ("group", "loo")


def group_advantages(returns: Tensor, groups: Tensor, estimator: str, eps: float = 1e-6) -> Tensor:
    """Critic-free advantages of E episodes from their returns and the group each belongs to.

    ``group`` (GRPO, Shao et al. 2024): ``A_i = (R_i - mean_g R) / (std_g R + eps)`` with the
    population std of the group; ``loo`` (RLOO, Kool et al. 2019; Ahmadian et al. 2024):
    ``A_i = R_i - mean_{j in g, j != i} R_j = G / (G - 1) * (R_i - mean_g R)``. A group must hold at
    least two episodes (with one there is no baseline to compare against).

    Args:
        returns: [E] f32, one return per episode.
        groups: [E] long, the group id of each episode (episodes of one world seed share it).
        estimator: ``group`` or ``loo``.
    Returns:
        [E] f32 advantages.
    """
    if estimator not in GROUP_ESTIMATORS:
        raise RLInputError(f"estimator = {estimator!r} is not known; choose one of {', '.join(GROUP_ESTIMATORS)}.")
    if returns.dim() != 1 or groups.shape != returns.shape:
        raise RLInputError(f"returns {tuple(returns.shape)} and groups {tuple(groups.shape)} must both be [E].")
    ids, inverse, counts = torch.unique(groups, return_inverse=True, return_counts=True)
    if (counts < 2).any():
        lonely = ids[counts < 2].tolist()[:5]
        raise RLInputError(f"groups {lonely} hold one episode; a group baseline needs >= 2 episodes per "
                           "world seed (rollout.group_size >= 2).")
    returns = returns.float()
    n = counts.float()[inverse]
    mean = torch.zeros(len(ids)).index_add_(0, inverse, returns)[inverse] / n
    centred = returns - mean
    if estimator == "loo":
        return centred * n / (n - 1)
    var = torch.zeros(len(ids)).index_add_(0, inverse, centred**2)[inverse] / n
    return centred / (var.sqrt() + eps)


def episode_returns(rewards: Tensor, episode_id: Tensor) -> tuple[Tensor, Tensor]:
    """(episode ids [E] sorted, undiscounted return of each [E]) from per-decision ``rewards`` [N]."""
    ids, inverse = torch.unique(episode_id, return_inverse=True)
    return ids, torch.zeros(len(ids)).index_add_(0, inverse, rewards.float())
