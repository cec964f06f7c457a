"""Trust-region optimisation over exact candidate distributions: pure maths on torch tensors.

``make_algorithm(name, policy_params, value_params, config)`` builds ``ppo``, ``trpo`` or ``pg``;
``algo.update(evaluate, rollout)`` runs one update and returns the metrics (``METRIC_KEYS``).
No environment, no model loading, no I/O here.

Names are imported from their modules on first use (PEP 562), so ``from teamtr.rl import
AlgoConfig`` (``teamtr.rl.settings``) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name -> the module of ``teamtr.rl`` that defines it.
_HOMES = {
    "ALGORITHMS": "registry", "make_algorithm": "registry",
    "METRIC_KEYS": "algorithms", "PPO": "algorithms", "Algorithm": "algorithms",
    "Evaluate": "algorithms", "PolicyGradient": "algorithms", "GRPO": "algorithms", "RLOO": "algorithms",
    "TRPO": "trpo", "conjugate_gradient": "trpo", "line_search": "trpo",
    "AlgoConfig": "settings", "RLInputError": "errors",
    "AdaptiveKLController": "kl", "FixedKLController": "kl", "make_kl_controller": "kl",
    "categorical_kl": "losses", "clipped_surrogate": "losses", "clipped_value_loss": "losses",
    "entropy": "losses", "explained_variance": "losses", "masked_log_softmax": "losses",
    "policy_terms": "losses",
    "gae": "advantages", "normalize": "advantages", "group_advantages": "advantages",
    "Minibatch": "rollout", "Rollout": "rollout",
    "linear_decay": "schedules", "warmup_cosine": "schedules",
}

__all__ = sorted(_HOMES)

if TYPE_CHECKING:
    from teamtr.rl.advantages import gae, group_advantages, normalize
    from teamtr.rl.algorithms import GRPO, METRIC_KEYS, PPO, RLOO, Algorithm, Evaluate, PolicyGradient
    from teamtr.rl.errors import RLInputError
    from teamtr.rl.kl import AdaptiveKLController, FixedKLController, make_kl_controller
    from teamtr.rl.losses import (categorical_kl, clipped_surrogate, clipped_value_loss, entropy,
                                  explained_variance, masked_log_softmax, policy_terms)
    from teamtr.rl.registry import ALGORITHMS, make_algorithm
    from teamtr.rl.rollout import Minibatch, Rollout
    from teamtr.rl.schedules import linear_decay, warmup_cosine
    from teamtr.rl.settings import AlgoConfig
    from teamtr.rl.trpo import TRPO, conjugate_gradient, line_search


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'teamtr.rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"teamtr.rl.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
