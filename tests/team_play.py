"""Test helper for the real worlds: play one episode through ``Team`` under a simple coordinator."""

from __future__ import annotations

import random

from teamtr.core import World
from teamtr.team import Team


def play(world: World, coordinator: str, seed: int) -> list[str]:
    """One episode; ``coordinator``: ``none`` (always the no-op), ``heuristic`` (the expert) or
    ``random`` (uniform over the candidates, seeded). Returns the state text of every decision."""
    team = Team(world)
    state = team.reset(seed)
    rng = random.Random(seed)
    texts, done = [state.state], False
    while not done:
        choice = {"none": len(state.candidates) - 1, "heuristic": state.expert}.get(
            coordinator, rng.randrange(len(state.candidates)))
        state, _, done, _ = team.step(choice)
        texts.append(state.state)
    return texts
