"""The PettingZoo view of a team: PettingZoo's own API test for every world, a faithful replay of
the scripted Team, the coordinators, invalid actions, the missing-extra message and seeding."""

import importlib
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from teamtr.core import TeamTRError
from teamtr.envs import available, make, register, spec
from teamtr.envs.registry import _CLASSES, _REGISTRY, WorldSpec
from teamtr.pettingzoo import MAX_ACTIONS, TeamParallelEnv
from teamtr.team import Team

RELAY = Path(__file__).resolve().parent.parent / "examples" / "relay"
BUILT_IN = ["escape-room", "software-team", "overcooked", "spread"]


def needs(world: str) -> None:
    if not available(world):
        pytest.skip(f"{world} needs {spec(world).install_hint()}")


def play(env: TeamParallelEnv, seed: int, pick) -> tuple[list, dict]:
    """One episode, each agent's action ``pick(infos[agent])``; returns the per-tick steps and the
    last infos."""
    _, infos = env.reset(seed=seed)
    ticks = []
    while env.agents:
        result = env.step({agent: pick(infos[agent]) for agent in env.agents})
        infos = result[4]
        ticks.append(result)
    return ticks, infos


@pytest.mark.parametrize("world", BUILT_IN)
def test_pettingzoos_parallel_api_test_passes_without_a_warning(world):
    needs(world)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel_api_test(TeamParallelEnv(world), num_cycles=1000)
    assert [str(w.message) for w in caught] == []


def test_a_plug_in_world_passes_the_api_test(monkeypatch):
    monkeypatch.syspath_prepend(str(RELAY))
    register(WorldSpec("relay", "relay_world.world:RelayWorld", "runners pass a baton"))
    try:
        parallel_api_test(TeamParallelEnv("relay", runners=4), num_cycles=100)
    finally:
        _REGISTRY.pop("relay", None)
        _CLASSES.pop("relay", None)


def replay(world: str, seed: int, choose, **options) -> tuple[dict, float, list]:
    """The scripted Team's episode with ``choose(state)`` picking, then the PettingZoo view's with
    the same coordinator and every agent following the world's plan; returns the Team's last info,
    its total reward and the view's per-tick steps."""
    team = Team(make(world, **options))
    state, done, total = team.reset(seed), False, 0.0
    while not done:
        state, reward, done, last = team.step(choose(state))
        total += reward
    ticks, infos = play(TeamParallelEnv(world, coordinator=choose, **options), seed, lambda info: info["plan"])
    assert next(iter(infos.values()))["outcome"] == last["outcome"]
    assert len(ticks) == team.ticks
    return last, total, ticks


@pytest.mark.parametrize("world, seeds", [("escape-room", [0, 1, 2]), ("software-team", [0, 1, 2]),
                                          ("overcooked", [0]), ("spread", [0, 1])])
def test_agents_following_the_worlds_plan_replay_the_scripted_team_exactly(world, seeds):
    needs(world)
    for seed in seeds:
        last, total, ticks = replay(world, seed, lambda state: state.expert)
        rewards = [step[1] for step in ticks]
        assert all(len(set(r.values())) == 1 for r in rewards)  # one team reward for everyone
        assert sum(next(iter(r.values())) for r in rewards) == pytest.approx(total, abs=1e-9)
        terminated, truncated = ticks[-1][2], ticks[-1][3]
        assert set(terminated.values()) == {last["terminated"]} and set(truncated.values()) == {last["truncated"]}
        if world == "escape-room":
            assert last["outcome"] == "success"


@pytest.mark.parametrize("world, options", [("escape-room", {}), ("overcooked", {"horizon": 60})])
def test_a_directives_own_terms_count_once_on_its_first_tick(world, options):
    """A coordinator repeating one directive pays the repeat term once per decision, as in Team
    (Overcooked's decisions last several ticks)."""
    needs(world)
    _, total, ticks = replay(world, 0, lambda state: 0, **options)
    repeats = [next(iter(step[4].values()))["terms"]["repeat"] for step in ticks]
    assert sum(r < 0 for r in repeats) >= 3
    assert sum(next(iter(step[1].values())) for step in ticks) == pytest.approx(total, abs=1e-9)


def test_observations_masks_and_plans_are_the_agents_views():
    env = TeamParallelEnv("escape-room")
    observations, infos = env.reset(seed=0)
    assert env.agents == env.possible_agents == ["agent_A", "agent_B", "agent_C"]
    directives = [infos[a]["directive"] for a in env.agents]
    assert sum(d is not None for d in directives) == 1  # the oracle's first directive, for one agent
    for agent in env.agents:
        view = env.world.view(agent)
        directive = infos[agent]["directive"]
        assert observations[agent] == f"{view.text}\ndirective: {directive or 'none'}"
        mask = infos[agent]["action_mask"]
        assert mask.shape == (MAX_ACTIONS,) and mask.sum() == len(view.actions) and mask[: len(view.actions)].all()
        assert 0 <= infos[agent]["plan"] < len(view.actions)
        if directive is None:
            assert view.actions[infos[agent]["plan"]] == "wait"
    assert env.action_space("agent_A").n == MAX_ACTIONS and env.action_space("agent_A") is env.action_space("agent_A")
    _, rewards, _, _, infos = env.step({a: infos[a]["plan"] for a in env.agents})
    step_info = infos["agent_A"]
    assert rewards["agent_A"] == pytest.approx(sum(step_info["terms"].values()))
    assert {"terms", "events", "outcome", "invalid_action"} <= set(step_info)
    assert any(e.kind == "directive_followed" for e in step_info["events"])  # delivered on the first tick


def test_the_noop_coordinator_never_directs_and_the_agents_run_out_of_steps():
    ticks, infos = play(TeamParallelEnv("escape-room", coordinator="noop", max_steps=6), 0,
                        lambda info: info["plan"])
    assert len(ticks) == 6 and all(info["directive"] is None for info in infos.values())
    assert infos["agent_A"]["outcome"] == "failure"
    assert set(ticks[-1][2].values()) == {True} and set(ticks[-1][3].values()) == {False}


def test_a_callable_coordinator_is_asked_at_every_due_decision():
    seen = []

    def coordinator(state):
        seen.append(state.tick)
        return state.expert

    ticks, infos = play(TeamParallelEnv("escape-room", coordinator=coordinator), 1, lambda info: info["plan"])
    assert infos["agent_A"]["outcome"] == "success"
    assert seen == list(range(len(ticks)))  # escape-room wants a decision every tick


@pytest.mark.parametrize("bad, message", [
    ("oracle", "coordinator='oracle' is not allowed; use 'expert', 'noop'"),
    (lambda state: 999, "the coordinator chose 999; pick a candidate index in 0.."),
])
def test_a_bad_coordinator_says_what_to_give(bad, message):
    with pytest.raises(TeamTRError, match=message):
        TeamParallelEnv("escape-room", coordinator=bad).reset(seed=0)


def test_an_action_outside_the_mask_is_the_worlds_no_action():
    masked, waiting = TeamParallelEnv("escape-room"), TeamParallelEnv("escape-room")
    masked.reset(seed=2)
    waiting.reset(seed=2)
    wait = {a: masked.world.view(a).actions.index("wait") for a in masked.agents}
    for _ in range(3):
        got = masked.step(dict.fromkeys(masked.agents, MAX_ACTIONS - 1))
        want = waiting.step(wait)
        assert got[:4] == want[:4]
        assert all(got[4][a]["invalid_action"] and not want[4][a]["invalid_action"] for a in masked.agents)
    with pytest.raises(TeamTRError, match="after the episode ended"):
        TeamParallelEnv("escape-room").step({})


def test_a_seed_fixes_every_episode_after_it():
    def episodes(env):
        team, seeds = env.team, []
        reset = team.reset
        team.reset = lambda seed: (seeds.append(seed), reset(seed))[1]
        rng = np.random.default_rng(5)
        traces = []
        for seed in (3, None, None):
            observations, infos = env.reset(seed=seed)
            traces.append([observations])
            for _ in range(4):
                actions = {a: int(rng.integers(int(infos[a]["action_mask"].sum()))) for a in env.agents}
                observations, rewards, _, _, infos = env.step(actions)
                traces[-1] += [observations, rewards]
        return seeds, traces

    seeds, first = episodes(TeamParallelEnv("software-team"))
    assert (seeds, first) == episodes(TeamParallelEnv("software-team"))
    assert seeds[0] == 3 and len(set(seeds)) == 3  # unseeded resets draw new episode seeds


def test_without_pettingzoo_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)
    monkeypatch.delitem(sys.modules, "teamtr.pettingzoo")
    with pytest.raises(TeamTRError, match=r"pip install 'teamtr\[pettingzoo\]'"):
        importlib.import_module("teamtr.pettingzoo")
