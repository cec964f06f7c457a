"""Property tests: random directive sequences through both worlds keep the worlds' invariants."""

import pytest
from hypothesis import given, settings
from fuzz import examples
from hypothesis import strategies as st

from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.envs.escape_room import HALL
from teamtr.envs.software_team import ITEMS
from teamtr.team import Team

CHOICES = st.lists(st.integers(0, 10**6), min_size=1, max_size=40)


def play(team, seed, choices, check):
    """Drive ``team`` with ``choices`` (taken modulo the candidates); return the trace."""
    state = team.reset(seed)
    trace = [state]
    for raw in choices:
        if team.finished:
            outcome = team.world.outcome()
            with pytest.raises(TeamTRError):
                team.step(0)
            assert team.world.step({}) == [] and team.world.outcome() == outcome
            break
        state, reward, done, info = team.step(raw % len(state.candidates))
        assert reward == pytest.approx(sum(info["terms"].values()))
        assert done == (info["outcome"] is not None)
        assert 0 <= state.expert < len(state.candidates) and state.candidates[-1].kind == "noop"
        check(team.world)
        trace.append((state, reward, info["events"]))
    return trace


def escape_invariants(world):
    held = {agent: item for agent, item in world._holding.items() if item is not None}
    assert len(world._where) == len(world.items)
    for item, where in world._where.items():
        if isinstance(where, str):  # held: by exactly that agent
            assert held.get(where) == item
        else:
            assert item not in held.values()
    for agent, pos in world._pos.items():  # never inside a room it may not enter
        assert pos == HALL or world._access[pos[0]] == agent


def software_invariants(world):
    for item, (_, duration, _) in ITEMS.items():
        assert 0 <= world._progress[item] <= duration
        if world._done[item]:
            assert world._progress[item] == duration
    if world.outcome() == "success":
        assert world._done["release"]
    assert world._tick <= world.deadline
    for agent, doing in world._doing.items():
        assert doing is None or ITEMS[doing[1]][0] == world.skill[agent]


@settings(max_examples=examples(60))
@given(seed=st.integers(0, 10**6), agents=st.integers(2, 6), items=st.integers(2, 5),
       names=st.sampled_from(["default", "heldout"]), compliance=st.sampled_from([1.0, 0.6]),
       choices=CHOICES)
def test_escape_room_random_directives(seed, agents, items, names, compliance, choices):
    options = dict(agents=agents, items=items, zones=max(items, 4), names=names, compliance=compliance)
    first = play(Team(make("escape-room", **options)), seed, choices, escape_invariants)
    again = play(Team(make("escape-room", **options)), seed, choices, escape_invariants)
    assert first == again  # same seed, same choices: the same episode


@settings(max_examples=examples(60))
@given(seed=st.integers(0, 10**6), engineers=st.integers(1, 4), bug_rate=st.sampled_from([0.0, 0.5, 1.0]),
       names=st.sampled_from(["default", "heldout"]), compliance=st.sampled_from([1.0, 0.6]),
       choices=CHOICES)
def test_software_team_random_directives(seed, engineers, bug_rate, names, compliance, choices):
    options = dict(engineers=engineers, bug_rate=bug_rate, names=names, compliance=compliance)
    first = play(Team(make("software-team", **options)), seed, choices, software_invariants)
    again = play(Team(make("software-team", **options)), seed, choices, software_invariants)
    assert first == again


@settings(max_examples=examples(40))
@given(seed=st.integers(0, 10**6), world=st.sampled_from(["escape-room", "software-team"]))
def test_oracle_state_text_decides_the_expert(seed, world):
    """The oracle is a function of the state text: equal texts, equal expert directives."""
    seen: dict[str, str] = {}
    for episode in (seed, seed + 1):
        team = Team(make(world))
        state, done = team.reset(episode), False
        while not done:
            expert = state.candidates[state.expert].text
            assert seen.setdefault(state.state, expert) == expert
            state, _, done, _ = team.step(state.expert)
