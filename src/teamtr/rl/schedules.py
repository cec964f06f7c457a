"""Schedules as pure functions of the update count: learning-rate warmup + cosine, entropy decay."""

from __future__ import annotations

import math


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float = 0.0) -> float:
    """Learning-rate multiplier for update ``step`` (0-based).

    Linear warmup ``(step + 1) / warmup`` over the first ``warmup`` updates (so the first update does
    not run at LR 0), then cosine decay from 1 to ``min_ratio`` at update ``total``, held after.
    """
    if step < warmup:
        return (step + 1) / warmup
    if total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def linear_decay(step: int, start: float, end: float, steps: int) -> float:
    """``start`` moving linearly to ``end`` over ``steps`` updates, then held at ``end`` (the floor)."""
    if steps <= 0:
        return end
    frac = min(1.0, step / steps)
    return start + (end - start) * frac
