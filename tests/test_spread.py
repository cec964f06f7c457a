"""MPE simple_spread world against the real ``mpe2`` package: assignment, steering, baselines."""

from __future__ import annotations

import statistics
import sys

import pytest

pytest.importorskip("mpe2", reason="needs pip install 'teamtr[mpe]'")

from hypothesis import given, settings  # noqa: E402
from fuzz import examples  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from teamtr.core import EVENT_KINDS, NOOP, TeamTRError, World  # noqa: E402
from teamtr.envs import make  # noqa: E402
from teamtr.envs.spread import COVER_RADIUS, SpreadWorld  # noqa: E402
from team_play import play  # noqa: E402



def test_is_a_world_with_n_squared_candidates() -> None:
    world = make("spread", N=4)
    assert isinstance(world, World)
    assert world.agents == ["agent_0", "agent_1", "agent_2", "agent_3"]
    texts = [d.text for d in world.directives()]
    assert len(texts) == 16 and texts[6] == "agent_1: cover landmark 2"
    assert world.check("agent_1", world.directives()[0]) == "the directive is for agent_0, not agent_1"


@pytest.mark.parametrize("options, words", [
    ({"N": 1}, ["N=1", "2..6"]),
    ({"N": 7}, ["N=7"]),
    ({"horizon": 0}, ["horizon=0"]),
    ({"local_ratio": 1.5}, ["local_ratio=1.5", "0.0..1.0"]),
])
def test_bad_options_name_key_value_and_allowed(options: dict, words: list[str]) -> None:
    with pytest.raises(TeamTRError) as err:
        SpreadWorld(**options)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_same_seed_same_layout_other_seed_other_layout() -> None:
    world = SpreadWorld()
    world.reset(11)
    a = world.describe()
    world.reset(12)
    assert world.describe() != a
    world.reset(11)
    assert world.describe() == a and a.endswith("Covered 0/3, 25 ticks left.")


def test_controller_parks_one_agent_on_its_landmark() -> None:
    covered = 0
    for seed in range(10):
        world = SpreadWorld(N=2)
        world.reset(seed)
        d = world.directives()[1]  # agent_0: cover landmark 1
        while world.outcome() is None:
            world.step({"agent_0": world.plan("agent_0", d), "agent_1": "stay"})
        covered += world.dist(0, 1) < COVER_RADIUS
    assert covered >= 9  # brakes in time: measured 10/10


def test_two_agents_sent_to_one_landmark_is_a_conflict() -> None:
    world = SpreadWorld(N=3)
    world.reset(0)
    d0, d1 = world.directives()[0], world.directives()[3]  # both to landmark 0
    events = world.step({"agent_0": world.plan("agent_0", d0), "agent_1": world.plan("agent_1", d1)})
    conflicts = [e.detail for e in events if e.kind == "conflict"]
    assert conflicts[0] == "agent_0 and agent_1 both sent to landmark 0"
    events = world.step({"agent_0": world.plan("agent_0", d0), "agent_1": world.plan("agent_1", d1)})
    assert "agent_0 and agent_1 both sent to landmark 0" not in [e.detail for e in events]


def test_heuristic_beats_no_coordinator_and_random() -> None:
    covered: dict[str, list[int]] = {"none": [], "random": [], "heuristic": []}
    for coordinator, runs in covered.items():
        world = SpreadWorld(N=3)
        for seed in range(12):
            play(world, coordinator, seed)
            runs.append(len(world.covered()))
    mean = {k: statistics.fmean(v) for k, v in covered.items()}
    assert mean["heuristic"] >= 2.5 and mean["heuristic"] > mean["none"] + 0.8, mean
    assert mean["random"] < mean["heuristic"], mean


def test_events_rewards_and_outcome() -> None:
    world = SpreadWorld(N=3)
    world.reset(4)
    kinds: list[str] = []
    rewards = []
    while world.outcome() is None:
        events = world.step({a: world.plan(a, None) for a in world.agents})
        kinds += [e.kind for e in events]
        rewards.append(world.tick_reward)
    assert set(kinds) <= {*EVENT_KINDS, "covered_at_end"} and kinds[-1] == world.outcome()
    assert kinds.count("covered_at_end") == len(world.covered())  # the headline landmarks_covered
    assert world.truncated() and world.t == world.horizon  # MPE's max cycles are a cut, not the task's end
    assert all(r <= 0 for r in rewards)  # -distance and -collisions: never positive
    assert kinds.count("milestone") >= len(world.covered())


@settings(max_examples=examples(10))
@given(seed=st.integers(0, 10_000), n=st.integers(2, 5))
def test_random_directives_never_crash_and_same_seed_same_episode(seed: int, n: int) -> None:
    world = SpreadWorld(N=n)
    first = play(world, "random", seed)
    assert world.outcome() is not None and world.t == 25
    assert play(world, "random", seed) == first


def test_expert_is_a_candidate_until_all_assigned_then_noop() -> None:
    world = SpreadWorld(N=3)
    world.reset(1)
    seen = []
    for _ in range(6):
        expert = world.expert_directive()
        assert expert == NOOP or expert in world.directives()
        seen.append(expert)
        if expert.target is not None:
            world.plan(expert.target, expert)
    assert [d.target for d in seen[:3]] == ["agent_0", "agent_1", "agent_2"] and seen[3] == NOOP


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mpe2", None)  # import now fails
    with pytest.raises(TeamTRError, match=r"pip install 'teamtr\[mpe\]'"):
        SpreadWorld()
