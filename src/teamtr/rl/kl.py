"""KL-to-reference coefficient control: a fixed coefficient, or the adaptive controller.

The adaptive rule is the one of Ziegler et al. (2019), used by TRL, OpenRLHF and verl:
``e = clip(KL / target - 1, -0.2, 0.2)`` and ``beta <- beta * (1 + e * n_steps / horizon)``, so beta
grows while the policy sits further from the reference than ``target`` and shrinks while it is closer.
"""

from __future__ import annotations

from teamtr.rl.errors import RLInputError


class FixedKLController:
    """A constant coefficient ``value``; ``update`` does nothing."""

    def __init__(self, coef: float) -> None:
        if coef < 0:
            raise RLInputError(f"kl_coef = {coef!r} is out of range; allowed: kl_coef >= 0.")
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Keep the coefficient (the interface of ``AdaptiveKLController.update``)."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Coefficient ``value`` steered so the measured KL(ref || policy) tracks ``target``.

    Args:
        init_coef: starting beta (>= 0).
        target: the KL (nats per decision) to hold (> 0).
        horizon: decisions over which a full 20% correction is applied (>= 1).
    """

    def __init__(self, init_coef: float, target: float, horizon: int) -> None:
        if init_coef < 0:
            raise RLInputError(f"kl_coef = {init_coef!r} is out of range; allowed: kl_coef >= 0.")
        if target <= 0:
            raise RLInputError(f"target_kl = {target!r} is out of range; allowed: target_kl > 0.")
        if horizon < 1:
            raise RLInputError(f"kl_horizon = {horizon!r} is out of range; allowed: >= 1.")
        self.value = float(init_coef)
        self.target = float(target)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """One controller step after an update that saw ``n_steps`` decisions with mean ``current_kl``."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value, "target": self.target, "horizon": float(self.horizon)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
        self.target = float(state["target"])
        self.horizon = int(state["horizon"])


KLController = FixedKLController | AdaptiveKLController


def make_kl_controller(kind: str, coef: float, target: float, horizon: int) -> KLController:
    """``kind`` is ``fixed`` or ``adaptive`` (the ``kl_control`` config key)."""
    if kind == "fixed":
        return FixedKLController(coef)
    if kind == "adaptive":
        return AdaptiveKLController(coef, target, horizon)
    raise RLInputError(f"kl_control = {kind!r} is not allowed; choose 'fixed' or 'adaptive'.")
