"""The coordinator's knobs that a config declares: LoRA settings and score normalisations.

Torch-free, so that ``teamtr.config`` can build its ``model.lora`` and ``policy.normalization`` from
here without loading a model library.
"""

from __future__ import annotations

from dataclasses import dataclass

#: How a candidate's summed token log-prob is normalised: ``sum`` (none), per ``token``, per ``word``.
NORMALIZATIONS = ("sum", "token", "word")
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA on the coordinator's decoder layers: ``rank`` r, scale ``alpha / r``, ``dropout`` on the
    adapter's input, and the Linear modules (by name) that carry an adapter."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0  # 0: PPO's ratio must be exactly 1 before the first step
    target_modules: tuple[str, ...] = DEFAULT_TARGETS

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"lora.rank = {self.rank!r}: must be an integer >= 1.")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < float("inf"):
            raise ValueError(f"lora.alpha = {self.alpha!r}: must be a finite number > 0.")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout = {self.dropout!r}: must be a number in [0, 1).")
        modules = tuple(self.target_modules) if isinstance(self.target_modules, (list, tuple)) else None
        if not modules or not all(isinstance(m, str) and m for m in modules):
            raise ValueError(f"lora.target_modules = {self.target_modules!r}: must be a non-empty list of "
                             f"module names, e.g. {list(DEFAULT_TARGETS[:2])}.")
        object.__setattr__(self, "target_modules", modules)
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "dropout", float(self.dropout))

    def as_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "alpha": self.alpha, "dropout": self.dropout,
                "target_modules": list(self.target_modules)}
