"""Baseline coordinator policies: ``random``, ``first``, ``noop``, ``oracle``.

A policy is anything with ``choose(states: list[TeamState]) -> list[int]``: one candidate index per
state, batched so that an LLM coordinator scores all live states in one call.
"""

from __future__ import annotations

import random
from typing import Protocol

from teamtr.core import TeamTRError
from teamtr.team import TeamState


class Policy(Protocol):
    """A coordinator: picks one candidate index per state."""

    def choose(self, states: list[TeamState]) -> list[int]: ...


class RandomPolicy:
    """Uniform over the candidates (no-op included), from its own seeded generator."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def choose(self, states: list[TeamState]) -> list[int]:
        return [self.rng.randrange(len(state.candidates)) for state in states]


class FirstPolicy:
    """Always the first candidate: a coordinator stuck on one habit."""

    def choose(self, states: list[TeamState]) -> list[int]:
        return [0 for _ in states]


class NoopPolicy:
    """Always "no new directive" (the last candidate): a team left alone."""

    def choose(self, states: list[TeamState]) -> list[int]:
        return [len(state.candidates) - 1 for state in states]


class OraclePolicy:
    """The world's expert directive (``TeamState.expert``): the upper bound and the demonstrator."""

    def choose(self, states: list[TeamState]) -> list[int]:
        return [state.expert for state in states]


BASELINES = {"random": RandomPolicy, "first": FirstPolicy, "noop": NoopPolicy, "oracle": OraclePolicy}


def baseline(name: str, seed: int = 0) -> Policy:
    """The baseline policy ``name``; ``seed`` seeds ``random``."""
    if name not in BASELINES:
        raise TeamTRError(f"Unknown policy {name!r}; baselines: {', '.join(BASELINES)}.")
    return RandomPolicy(seed) if name == "random" else BASELINES[name]()
