"""The update's settings, ``AlgoConfig``: every knob's default, allowed range and meaning, once.

Torch-free, so the config tree can validate ``algo.*`` keys (and a text game can run) without torch.
A range is written in interval notation: ``"(0, 1)"`` excludes both ends, ``"[1, inf)"`` is ``>= 1``.
``AlgoConfig.describe()`` lists every field with its type, default, range and help.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Mapping

from teamtr.rl.errors import RLInputError


#: The algorithms ``algo.name`` may choose (``teamtr.rl.registry`` maps each to its class).
ALGORITHM_NAMES = ("ppo", "trpo", "pg", "grpo", "rloo")

@dataclass(frozen=True)
class Range:
    """An interval of allowed numbers; ``low``/``high`` themselves are allowed when ``*_closed``."""

    low: float
    high: float
    low_closed: bool
    high_closed: bool

    @classmethod
    def parse(cls, text: str) -> Range:
        """``"(0, 1]"`` -> ``Range(0, 1, False, True)``; ``inf`` is written ``inf``."""
        low, high = (float(part) for part in text[1:-1].split(","))
        return cls(low, high, text[0] == "[", text[-1] == "]")

    def __contains__(self, value: float) -> bool:
        above = self.low <= value if self.low_closed else self.low < value
        below = value <= self.high if self.high_closed else value < self.high
        return above and below

    def text(self, name: str) -> str:
        """``0 < clip_eps < 1``, ``1 <= epochs``: the range as a person reads it."""
        low = f"{self.low:g} {'<=' if self.low_closed else '<'} {name}"
        return low if self.high == math.inf else f"{low} {'<=' if self.high_closed else '<'} {self.high:g}"


def knob(default: Any, allowed: str | tuple[str, ...] | None, help: str) -> Any:
    """A settings field: its default, its allowed range (interval notation) or choices (a tuple of
    strings), and its one-line meaning. The type comes from the annotation; ``| None`` allows None."""
    if isinstance(allowed, str):
        meta: dict[str, Any] = {"range": Range.parse(allowed)}
    else:
        meta = {"choices": allowed}
    return field(default=default, metadata={**meta, "help": help})


_KIND_WORDS = {"float": "a finite number", "int": "a whole number", "bool": "true or false",
               "str": "a string"}


@dataclass
class AlgoConfig:
    """Every knob of the update; field names are the ``algo.*`` config keys. Defaults follow the seed
    (5.2). A bad value raises ``RLInputError`` (a ``ValueError``) naming the key, the value and the
    allowed range."""

    clip_eps: float = knob(0.2, "(0, 1)", "PPO ratio clip; the seed: 0.1-0.3, lower it first if "
                           "reward oscillates")
    value_clip: float | None = knob(0.2, "(0, inf)", "clip of V - V_old in the value loss; None = "
                                    "plain MSE")
    vf_coef: float = knob(0.5, "[0, inf)", "weight of the value loss (PPO/PG share one optimiser "
                          "with the policy)")
    gamma: float = knob(0.99, "[0, 1]", "discount; >= 0.99 for tasks over 100 steps")
    lam: float = knob(0.95, "[0, 1]", "GAE lambda; 0.97-0.98 for sparse rewards")
    epochs: int = knob(4, "[1, inf)", "passes over each rollout (PPO/PG); 4-8 is safe")
    minibatch_size: int = knob(64, "[1, inf)", "decisions per optimiser step (PPO/PG/GRPO/RLOO), per "
                               "evaluate call (TRPO)")
    # Gradient accumulation: the same step as one pass over the minibatch, the memory of a chunk.
    micro_batch_size: int | None = knob(None, "[1, inf)", "decisions per gradient pass within a "
                                        "minibatch (PPO/PG/GRPO/RLOO): the same step in chunks, "
                                        "less memory; None = the whole minibatch at once")
    lr: float = knob(3e-5, "(0, inf)", "peak policy LR (LoRA); full fine-tuning wants 1e-6..1e-5")
    min_lr_ratio: float = knob(0.0, "[0, 1]", "cosine decays to lr * min_lr_ratio")
    warmup_updates: int = knob(10, "[0, inf)", "linear LR warmup, in updates")
    total_updates: int = knob(1000, "[1, inf)", "cosine and entropy decay length; set it to the "
                              "run's update count")
    ent_coef_start: float = knob(0.05, "[0, inf)", "entropy bonus at update 0")
    ent_coef_end: float = knob(0.01, "[0, inf)", "entropy bonus after total_updates (the floor)")
    kl_coef: float = knob(0.05, "[0, inf)", "KL(ref || new) penalty coefficient (initial value if "
                          "adaptive)")
    kl_control: str = knob("fixed", ("fixed", "adaptive"), "fixed coefficient or the adaptive "
                           "controller steering KL(ref || new) to target_kl")
    target_kl: float = knob(0.02, "(0, inf)", "per-decision KL target: early stop (old||new) and "
                            "adaptive (ref||new)")
    kl_horizon: int = knob(10000, "[1, inf)", "adaptive controller horizon, in decisions")
    early_stop_factor: float | None = knob(1.5, "(0, inf)", "stop epochs when KL(old||new) > factor "
                                           "* target_kl; None = never")
    max_grad_norm: float | None = knob(1.0, "(0, inf)", "grad-norm clip, policy and value head "
                                       "each; None = none")
    weight_decay: float = knob(0.0, "[0, inf)", "AdamW weight decay")
    normalize_advantages: bool = knob(True, None, "zero-mean unit-std advantages over the rollout")
    trpo_delta: float = knob(0.01, "(0, inf)", "TRPO's hard bound on mean KL(old || new)")
    cg_iters: int = knob(10, "[1, inf)", "conjugate-gradient iterations")
    cg_damping: float = knob(0.1, "[0, inf)", "Fisher damping: solves (F + damping I) s = g")
    backtrack_iters: int = knob(10, "[1, inf)", "line-search tries")
    backtrack_ratio: float = knob(0.5, "(0, 1)", "step shrink per try")
    # A subset keeps every evaluate call within a minibatch; the line search still checks every
    # decision's KL.
    fisher_batch_size: int | None = knob(None, "[1, inf)", "decisions (a random subset) in the "
                                         "Fisher-vector products; None = minibatch_size")
    value_lr: float = knob(1e-3, "(0, inf)", "value-head LR (PPO/PG: its own param group; TRPO: "
                           "its own Adam)")
    value_epochs: int = knob(5, "[1, inf)", "TRPO: passes of the value head over each rollout")
    seed: int = knob(0, None, "minibatch shuffling")

    def __post_init__(self) -> None:
        for f in fields(self):
            setattr(self, f.name, _checked(f, getattr(self, f.name)))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> AlgoConfig:
        """Build from a plain mapping; an unknown key is an error that lists the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise RLInputError(f"unknown algorithm key(s) {unknown}; known: {sorted(known)}.")
        return cls(**values)

    @classmethod
    def describe(cls) -> dict[str, dict[str, Any]]:
        """Every field: ``{"type", "optional", "default", "range" (low, high, low_closed,
        high_closed) or None, "choices" or None, "allowed" (text), "help"}``, in declaration order."""
        out = {}
        for f in fields(cls):
            kind, optional = _kind(f)
            rng = f.metadata.get("range")
            out[f.name] = {
                "type": kind, "optional": optional,
                "default": f.default if f.default is not MISSING else None,
                "range": None if rng is None else (rng.low, rng.high, rng.low_closed, rng.high_closed),
                "choices": f.metadata.get("choices"), "allowed": _allowed(f), "help": f.metadata["help"],
            }
        return out


def _kind(f: Field) -> tuple[str, bool]:
    """(``float``/``int``/``bool``/``str``, None allowed) from the annotation (a string here)."""
    text = str(f.type)
    return text.replace(" | None", ""), text.endswith("| None")


def _allowed(f: Field) -> str:
    kind, optional = _kind(f)
    rng, choices = f.metadata.get("range"), f.metadata.get("choices")
    if rng is not None:
        text = rng.text(f.name)
    elif choices:
        text = " or ".join(repr(c) for c in choices)
    else:
        text = _KIND_WORDS[kind]
    return f"{text}, or None" if optional else text


def _checked(f: Field, value: Any) -> Any:
    """``value`` converted to the field's type, or ``RLInputError`` naming key, value and range."""
    kind, optional = _kind(f)
    if value is None and optional:
        return None
    converted = _convert(kind, value)
    if converted is None:
        raise RLInputError(f"{f.name} = {value!r} is not {_KIND_WORDS[kind]}; allowed: {_allowed(f)}.")
    choices, rng = f.metadata.get("choices"), f.metadata.get("range")
    if choices and converted not in choices:
        raise RLInputError(f"{f.name} = {value!r} is not allowed; choose {_allowed(f)}.")
    if rng is not None and converted not in rng:
        raise RLInputError(f"{f.name} = {value!r} is out of range; allowed: {_allowed(f)}.")
    return converted


def _convert(kind: str, value: Any) -> Any:
    """The value as ``kind`` (a whole float counts as an int; NaN and inf are no number), else None."""
    if isinstance(value, bool) or kind in ("bool", "str"):
        ok = isinstance(value, bool) if kind == "bool" else isinstance(value, str)
        return value if ok else None
    if isinstance(value, int):
        if kind == "int":
            return value
        return float(value) if abs(value) < 2 ** 1000 else None  # larger ints overflow a float
    if isinstance(value, float) and math.isfinite(value):
        if kind == "int":
            return int(value) if value.is_integer() else None
        return value
    return None
