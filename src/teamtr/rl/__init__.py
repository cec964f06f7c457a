"""Trust-region optimisation over exact candidate distributions: pure maths on torch tensors.

``make_algorithm(name, policy_params, value_params, config)`` builds ``ppo``, ``trpo`` or ``pg``;
``algo.update(evaluate, rollout)`` runs one update and returns the metrics (``METRIC_KEYS``).
No environment, no model loading, no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from torch import Tensor

from teamtr.rl.advantages import gae, normalize
from teamtr.rl.algorithms import PPO, METRIC_KEYS, AlgoConfig, Algorithm, Evaluate, PolicyGradient
from teamtr.rl.kl import AdaptiveKLController, FixedKLController, make_kl_controller
from teamtr.rl.losses import (RLInputError, categorical_kl, clipped_surrogate, clipped_value_loss,
                              entropy, explained_variance, masked_log_softmax, policy_terms)
from teamtr.rl.rollout import Minibatch, Rollout, RolloutBuffer
from teamtr.rl.schedules import linear_decay, warmup_cosine
from teamtr.rl.trpo import TRPO, conjugate_gradient, line_search

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "trpo": TRPO, "pg": PolicyGradient}


def make_algorithm(name: str, policy_params: Sequence[dict[str, Any]],
                   value_params: Iterable[Tensor], config: AlgoConfig | None = None) -> Algorithm:
    """Build an algorithm by name (``ppo``, ``trpo`` or ``pg``).

    Args:
        policy_params: param groups ``[{"params": [tensors], "lr_scale": 1.0}, ...]``; lr_scale is a
            per-group LR multiplier (the seed's "tune the last layers more"; ignored by TRPO).
        value_params: the value head's tensors (disjoint from the policy's).
        config: ``AlgoConfig`` (defaults when None).
    """
    if name not in ALGORITHMS:
        raise RLInputError(f"algorithm = {name!r} is not known; choose one of {sorted(ALGORITHMS)}.")
    return ALGORITHMS[name](policy_params, value_params, config or AlgoConfig())


__all__ = [
    "ALGORITHMS", "METRIC_KEYS", "PPO", "TRPO", "AdaptiveKLController", "AlgoConfig", "Algorithm",
    "Evaluate", "FixedKLController", "Minibatch", "PolicyGradient", "RLInputError", "Rollout",
    "RolloutBuffer", "categorical_kl", "clipped_surrogate", "clipped_value_loss",
    "conjugate_gradient", "entropy", "explained_variance", "gae", "line_search", "linear_decay",
    "make_algorithm", "make_kl_controller", "masked_log_softmax", "normalize", "policy_terms",
    "warmup_cosine",
]
