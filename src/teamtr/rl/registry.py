"""The algorithms by name: ``make_algorithm(name, policy_params, value_params, config)``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from torch import Tensor

from teamtr.rl.algorithms import GRPO, PPO, RLOO, Algorithm, PolicyGradient
from teamtr.rl.errors import RLInputError
from teamtr.rl.settings import ALGORITHM_NAMES, AlgoConfig
from teamtr.rl.trpo import TRPO

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "trpo": TRPO, "pg": PolicyGradient, "grpo": GRPO,
                                          "rloo": RLOO}
assert tuple(ALGORITHMS) == ALGORITHM_NAMES, "rl/settings.py ALGORITHM_NAMES and the registry disagree"


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
