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


def assert_same_play_but_the_task(a: World, b: World, seeds: range) -> None:
    """Two worlds that differ only in their task text: under the expert, every decision's state,
    candidates and expert choice and every reward are the same, and the task texts differ."""
    one, two = Team(a), Team(b)
    for seed in seeds:
        x, y, done = one.reset(seed), two.reset(seed), False
        assert x.task != y.task
        while not done:
            assert (x.state, [c.text for c in x.candidates], x.expert) == (y.state, [c.text for c in y.candidates], y.expert)
            x, rx, done, _ = one.step(x.expert)
            y, ry, _, _ = two.step(y.expert)
            assert rx == ry
