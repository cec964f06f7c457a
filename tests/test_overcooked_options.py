"""Overcooked world options for training at CPU cost: layouts drawn per episode, the compact state
text, and the tables they make (one row per layout, unseen layouts as a generalisation suite)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("overcooked", reason="needs pip install 'teamtr[overcooked]'")

from teamtr.config import load_config  # noqa: E402
from teamtr.core import TeamTRError  # noqa: E402
from teamtr.envs import overcooked as oc  # noqa: E402
from teamtr.envs.overcooked_chef import directive  # noqa: E402
from teamtr.eval.policies import build_policies  # noqa: E402
from teamtr.eval.suites import eval_options, evaluate_table, suites  # noqa: E402
from team_play import play  # noqa: E402

def _token_count(text: str) -> int:
    """SmolLM2 tokens of ``text``: from the converted tokenizer file when there is one (0.1 s; torch
    and transformers take 10 s to import), else as the backbone loads it."""
    from tokenizers import Tokenizer

    global _TOKENIZER
    if _TOKENIZER is None:
        cache = Path(os.environ.get("TEAMTR_CACHE", Path.home() / ".cache" / "teamtr")).expanduser()  # backbone.cache_dir
        path = cache / "smollm2-135m-instruct" / "tokenizer.json"
        if path.is_file():
            _TOKENIZER = Tokenizer.from_file(str(path))
        else:
            from teamtr.policy.backbone import _smollm2_tokenizer

            _TOKENIZER = _smollm2_tokenizer()._tokenizer
    return len(_TOKENIZER.encode(text, add_special_tokens=False).ids)


_TOKENIZER = None
FOUR = ["cramped_room", "asymmetric_advantages", "coordination_ring", "counter_circuit"]


def test_a_layout_list_takes_turns_by_seed_with_each_layouts_goal_and_task() -> None:
    world = oc.OvercookedWorld(layout=["cramped_room", "forced_coordination"], horizon=200)
    seen = {}
    for seed in (6, 7, 8, 9):
        world.reset(seed)
        seen[seed] = (world.layout, world.goal_soups, world.task)
        assert world.mdp is oc._load(world.layout)[0]
    assert [seen[s][0] for s in (6, 7, 8, 9)] == ["cramped_room", "forced_coordination"] * 2
    # GOAL_SOUPS per 400 ticks, scaled to 200 and rounded up: cramped 6 -> 3, forced 7 -> 4.
    assert seen[6][1] == 3 and seen[7][1] == 4
    assert "(cramped room)" in seen[6][2] and "(forced coordination)" in seen[7][2]
    # The same seed replays the same episode, whichever layout the world held before.
    first = play(world, "random", 7)
    world.reset(6)
    assert play(world, "random", 7) == first and world.layout == "forced_coordination"


def test_a_one_layout_list_is_that_layout() -> None:
    listed = oc.OvercookedWorld(layout=["coordination_ring"], horizon=80)
    plain = oc.OvercookedWorld(layout="coordination_ring", horizon=80)
    assert play(listed, "heuristic", 3) == play(plain, "heuristic", 3)
    assert listed.soups == plain.soups and listed.task == plain.task


@pytest.mark.parametrize("options, words", [
    ({"layout": []}, ["layout=[]", "cramped_room"]),
    ({"layout": ["cramped_room", "kitchen"]}, ["layout='kitchen'", "counter_circuit"]),
    ({"state_text": "short"}, ["state_text='short'", "grid, compact"]),
])
def test_bad_new_options_name_key_value_and_allowed(options: dict, words: list[str]) -> None:
    with pytest.raises(TeamTRError) as err:
        oc.OvercookedWorld(**options)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_compact_text_says_holdings_subtasks_pots_and_counter_items() -> None:
    world = oc.OvercookedWorld(layout="forced_coordination", state_text="compact")
    world.reset(0)
    # chef_1 is on its own rule; chef_0 has nothing to fetch on its side.
    assert world.describe() == ("chef_0 by a pot, holds nothing, own: wait; chef_1 by the onions, holds "
                                "nothing, own: pass an onion over the counter. Pot 1 empty, pot 2 empty.")
    d = directive("chef_1", "pass_onion")
    world.step({"chef_1": world.plan("chef_1", d), "chef_0": world.plan("chef_0", None)})
    assert world.describe().split("; ")[1].startswith("chef_1 by the onions, holds nothing, pass an onion over")
    while not world.done("chef_1", d):
        world.step({"chef_1": world.plan("chef_1", d), "chef_0": "stay"})
    text = world.describe()
    # Done: the chef is back on its own rule; the onion lies on the shared counter.
    assert ", own: " in text.split(";")[1] and text.endswith("On counters: onion.")
    # The static kitchen is in the task (encoded once per layout), not in each state.
    assert "Kitchen (XXXPX/O.X.P/O.X.X/D.X.X/XXXSX)" in world.task and "X" not in text


def test_compact_text_is_shorter_and_tick_free() -> None:
    grid = oc.OvercookedWorld(layout="asymmetric_advantages", horizon=120)
    compact = oc.OvercookedWorld(layout="asymmetric_advantages", horizon=120, state_text="compact")
    a, b = play(grid, "heuristic", 1), play(compact, "heuristic", 1)
    assert grid.soups == compact.soups  # the text is what the coordinator reads, not what happens
    tokens = [sum(map(_token_count, texts)) / len(texts) for texts in (a, b)]
    assert tokens[1] < 0.8 * tokens[0]  # measured 55.8 vs 74.6 tokens a state
    assert not any("ticks left" in t or "Served" in t for t in b)  # the same text at any horizon


def test_a_layout_list_gives_one_suite_per_layout_and_unseen_ones_in_generalisation() -> None:
    base = {"layout": FOUR, "horizon": 200}
    held = suites("overcooked", base, "heldout")
    assert list(held) == [f"layout={name}" for name in FOUR]
    assert held["layout=counter_circuit"] == {"layout": "counter_circuit", "horizon": 200}
    gen = suites("overcooked", base, "generalisation")
    assert list(gen)[4:] == ["layout=forced_coordination unseen"]
    assert gen["layout=forced_coordination unseen"]["layout"] == "forced_coordination"
    assert list(suites("overcooked", {"layout": "cramped_room"}, "generalisation")) == ["heldout"]
    assert eval_options(base, {"horizon": 400}) == {"layout": FOUR, "horizon": 400}


def test_table_rows_name_the_layout_they_came_from() -> None:
    options = {"layout": ["cramped_room", "forced_coordination"], "horizon": 60, "decision_every": 25}
    rows = evaluate_table("overcooked", suites("overcooked", options), build_policies(["heuristic", "noop"]), [0, 1])
    assert list(rows) == ["heuristic @ layout=cramped_room", "heuristic @ layout=forced_coordination",
                          "noop @ layout=cramped_room", "noop @ layout=forced_coordination"]
    # Each row is its own kitchen: the same policy serves differently on the two layouts.
    for policy in ("heuristic", "noop"):
        one = oc.OvercookedWorld(layout="forced_coordination", horizon=60, decision_every=25)
        soups = [(play(one, "heuristic" if policy == "heuristic" else "none", s), one.soups)[1] for s in (0, 1)]
        assert rows[f"{policy} @ layout=forced_coordination"]["soups"] == pytest.approx(sum(soups) / 2)


@pytest.mark.parametrize("name", ["overcooked", "overcooked_lolo"])
def test_the_shipped_configs_train_short_and_evaluate_the_full_task(name: str) -> None:
    config = load_config(name)
    assert config.env.options()["horizon"] == 200 and config.train.eval_env == {"horizon": 400}
    assert config.train.final_baselines == ["heuristic", "noop", "random"]
    table = suites("overcooked", eval_options(config.env.options(), config.train.eval_env), config.train.final_suite)
    assert len(table) == 5 and all(opts["horizon"] == 400 for opts in table.values())
    assert config.rollout.episodes == len(config.env.options()["layout"])  # each layout once an iteration


def test_the_ppo_alone_config_plays_the_same_games_as_the_cloned_one() -> None:
    """overcooked_ppo's rows join overcooked's table (its baselines and zero-shot row are not rerun):
    the same world, training episodes, evaluation suites and held-out seeds; no cloning."""
    ppo, bc = load_config("overcooked_ppo"), load_config("overcooked")
    assert ppo.env == bc.env and ppo.rollout == bc.rollout and ppo.rewards == bc.rewards
    assert (ppo.train.eval_env, ppo.train.final_suite, ppo.train.eval_seed_offset, ppo.train.final_eval_episodes) == (
        bc.train.eval_env, bc.train.final_suite, bc.train.eval_seed_offset, bc.train.final_eval_episodes)
    assert not ppo.bc.enabled and ppo.algo.ref == "base" and ppo.train.final_baselines == []


def test_eval_env_cannot_change_the_world() -> None:
    with pytest.raises(TeamTRError, match="eval_env"):
        load_config("overcooked", ["train.eval_env={name: escape-room}"])
