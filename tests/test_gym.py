"""The gymnasium ids: registration on ``import teamtr``, gymnasium's own env checker for every
world, the documented info keys, the fixed action space and seeding."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import teamtr
from teamtr.core import TeamTRError
from teamtr.envs import available, names, register, spec
from teamtr.envs.registry import _CLASSES, _REGISTRY, WorldSpec
from teamtr.gym import MAX_CANDIDATES, TeamEnv, env_id, register_ids

ROOT = Path(__file__).resolve().parent.parent
RELAY = ROOT / "examples" / "relay"
BUILT_IN = ["escape-room", "software-team", "overcooked", "spread"]


def needs(world: str) -> None:
    if not available(world):
        pytest.skip(f"{world} needs {spec(world).install_hint()}")


@pytest.fixture
def relay_registered(monkeypatch):
    """The example plug-in world registered by name, with its gymnasium id (for this test only)."""
    monkeypatch.syspath_prepend(str(RELAY))
    register(WorldSpec("relay", "relay_world.world:RelayWorld", "runners pass a baton"))
    yield register_ids()
    _REGISTRY.pop("relay", None)
    _CLASSES.pop("relay", None)
    gym.registry.pop("teamtr/Relay-v0", None)


def run_python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(teamtr.__file__).parent.parent)}
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_env_ids_are_camel_case_world_names():
    assert [env_id(w) for w in BUILT_IN] == [
        "teamtr/EscapeRoom-v0", "teamtr/SoftwareTeam-v0", "teamtr/Overcooked-v0", "teamtr/Spread-v0"]
    assert env_id("my_relay.v2") == "teamtr/MyRelayV2-v0"


def test_import_teamtr_registers_every_world_once_gymnasium_is_imported_and_loads_neither_itself():
    out = run_python(
        "import sys, teamtr\n"
        "print('gymnasium' in sys.modules, 'torch' in sys.modules)\n"
        "import gymnasium as gym\n"
        "print(sorted(k for k in gym.registry if k.startswith('teamtr/')))\n"
        "print(gym.make('teamtr/EscapeRoom-v0', agents=4).reset(seed=0)[0].split('.')[1])\n"
        "print('torch' in sys.modules)\n"
    ).splitlines()
    assert out[0] == "False False"
    assert out[1] == str(sorted(env_id(w) for w in names()))
    assert out[2] == " Team: agent_A, agent_B, agent_C, agent_D"
    assert out[3] == "False"


def test_gymnasium_alone_makes_an_id_that_names_the_module():
    out = run_python(
        "import gymnasium as gym\n"
        "env = gym.make('teamtr:teamtr/SoftwareTeam-v0')\n"
        "print(type(env.unwrapped).__name__, env.action_space)\n"
    )
    assert out.strip() == f"TeamEnv Discrete({MAX_CANDIDATES})"


@pytest.mark.parametrize("world", BUILT_IN)
def test_gymnasiums_env_checker_passes_without_a_warning(world):
    needs(world)
    env = gym.make(env_id(world))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


def test_a_plug_in_world_gets_its_id_and_passes_the_checker(relay_registered):
    assert relay_registered[:4] == [env_id(w) for w in BUILT_IN] and relay_registered[-1] == "teamtr/Relay-v0"
    env = gym.make("teamtr/Relay-v0", runners=4)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=0)
    assert "runner_4" in obs and info["candidates"][-1] == "no new directive"


@pytest.mark.parametrize("env_id_", ["teamtr/EscapeRoom-v0", "teamtr/SoftwareTeam-v0"])
def test_the_oracle_wins_and_every_documented_info_key_is_there(env_id_):
    env = gym.make(env_id_)
    obs, info = env.reset(seed=1)
    assert obs.splitlines()[1].startswith("state: tick 0 of ")
    assert set(info) == {"candidates", "action_mask", "expert"}
    assert env.action_space.n == MAX_CANDIDATES and info["action_mask"].shape == (MAX_CANDIDATES,)
    assert info["action_mask"].sum() == len(info["candidates"]) and info["action_mask"][: len(info["candidates"])].all()
    assert info["candidates"][-1] == "no new directive"
    total, done = 0.0, False
    while not done:
        expert = info["expert"]
        text = info["candidates"][expert]
        obs, reward, terminated, truncated, info = env.step(expert)
        assert set(info) == {"candidates", "action_mask", "expert", "outcome", "terms", "events",
                             "ticks", "directive", "invalid_action"}
        assert info["directive"] == text and not info["invalid_action"] and info["ticks"] == 1
        assert reward == pytest.approx(sum(info["terms"].values()))
        total += reward
        done = terminated or truncated
    assert info["outcome"] == "success" and terminated and not truncated and total > 10
    assert any(e.kind == "success" for e in info["events"])


def test_an_index_past_the_candidates_is_the_noop():
    masked, noop = gym.make("teamtr/EscapeRoom-v0"), gym.make("teamtr/EscapeRoom-v0")
    _, info = masked.reset(seed=3)
    noop.reset(seed=3)
    n = len(info["candidates"])
    for _ in range(3):
        got = masked.step(MAX_CANDIDATES - 1)
        want = noop.step(n - 1)
        assert got[:4] == want[:4] and got[4]["terms"] == want[4]["terms"]
        assert got[4]["invalid_action"] and not want[4]["invalid_action"]
        assert got[4]["directive"] == "no new directive"


def test_a_world_with_more_candidates_than_the_action_space_names_the_option():
    env = TeamEnv("spread", max_candidates=4) if available("spread") else TeamEnv("escape-room", max_candidates=4)
    with pytest.raises(TeamTRError, match=r"more than max_candidates=4; pass max_candidates=\d+ or more"):
        env.reset(seed=0)


@pytest.mark.parametrize("world", BUILT_IN)
def test_a_seed_fixes_every_episode_after_it(world):
    needs(world)

    def episodes(env):
        team, seeds = env.unwrapped.team, []
        reset = team.reset
        team.reset = lambda seed: (seeds.append(seed), reset(seed))[1]
        rng = np.random.default_rng(7)
        traces = []
        for seed in (11, None, None):
            obs, info = env.reset(seed=seed)
            traces.append([obs])
            for _ in range(3):
                obs, reward, *_ = env.step(int(rng.integers(len(info["candidates"]))))
                traces[-1] += [obs, reward]
        return seeds, traces

    (seeds, first), (seeds_again, second) = episodes(gym.make(env_id(world))), episodes(gym.make(env_id(world)))
    assert first == second and seeds == seeds_again
    assert seeds[0] == 11 and len(set(seeds)) == 3  # unseeded resets draw new episode seeds
