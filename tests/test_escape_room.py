"""escape-room: text, candidates, access rules, the oracle and option errors."""

import random
import re

import pytest

from teamtr.core import Directive, TeamTRError
from teamtr.envs import make
from teamtr.envs.escape_room import VOCAB
from teamtr.envs.vocabulary import words
from teamtr.eval import baseline, run_episodes, summarize
from teamtr.team import Team
from team_play import assert_same_play_but_the_task


def test_state_text_at_reset_is_compact_and_says_who_may_enter_where():
    world = make("escape-room")
    world.reset(1)
    assert world.describe() == (
        "tick 0 of 14. map: in library (only agent_C may enter). key: in cellar (only agent_A "
        "may enter). lamp: in vault (only agent_B may enter). agent_A: in hall, idle. agent_B: in "
        "hall, idle. agent_C: in hall, idle."
    )
    assert len(world.describe().split()) <= 40  # ~50 SmolLM2 tokens: cheap to read every tick


def test_hints_name_the_items_each_agent_may_fetch_until_they_are_taken():
    world = make("escape-room", hints=True)
    team = Team(world)
    state = team.reset(1)
    assert state.state.endswith(
        "agent_A: in hall, idle, may fetch the key. agent_B: in hall, idle, may fetch the lamp. "
        "agent_C: in hall, idle, may fetch the map."
    )
    for _ in range(3):  # the oracle sends agent_C for the map first; once it holds the map, no hint
        state, *_ = team.step(state.expert)
    assert "map: held by agent_C" in state.state and "agent_C: in library, fetch map." in state.state
    assert "may fetch the map" not in state.state and "may fetch the lamp" in state.state
    plain = make("escape-room")
    plain.reset(1)
    assert "may fetch" not in plain.describe()
    with pytest.raises(TeamTRError, match="hints = 'yes'"):
        make("escape-room", hints="yes")


def test_default_candidates_fetch_each_item_or_open_the_door_for_each_agent():
    state = Team(make("escape-room")).reset(1)
    texts = [c.text for c in state.candidates]
    assert len(texts) == 13 and texts[-1] == "no new directive"
    assert texts[:4] == ["agent_A: fetch the map", "agent_A: fetch the key",
                         "agent_A: fetch the lamp", "agent_A: open the door"]
    assert texts[state.expert] == "agent_C: fetch the map"  # first item, the one agent who may enter


def test_oracle_solves_default_in_nine_decisions():
    for seed in range(50):
        team = Team(make("escape-room"))
        state, done, total = team.reset(seed), False, 0.0
        while not done:
            state, reward, done, info = team.step(state.expert)
            total += reward
        assert info["outcome"] == "success" and state.tick == 9
        assert total > 10.0


def test_fetching_from_a_forbidden_room_is_invalid_and_wastes_the_tick():
    team = Team(make("escape-room"))
    state = team.reset(1)  # the map lies in the library: only agent_C may enter
    bad = [c.text for c in state.candidates].index("agent_A: fetch the map")
    state, reward, _, info = team.step(bad)
    kinds = [e.kind for e in info["events"]]
    assert kinds[0] == "directive_invalid" and "only agent_C may enter the library" in info["events"][0].detail
    assert info["terms"]["invalid"] == -0.5
    assert "agent_A: in hall, idle." in state.state
    assert state.history[-1] == "agent_A could not: only agent_C may enter the library"


def test_an_agent_cannot_step_into_a_room_it_may_not_enter():
    world = make("escape-room")
    world.reset(1)
    events = world.step({"agent_A": "move library", "agent_B": "wait", "agent_C": "move library"})
    assert world._pos["agent_A"] == ("hall", 0) and world._pos["agent_C"] == ("library", 1)
    assert [e.kind for e in events].count("idle") == 2  # A tried in vain, B waited with work to do


def test_two_agents_grabbing_one_item_is_a_conflict():
    world = make("escape-room")
    world.reset(1)
    for _ in range(2):
        world.step({"agent_C": "move library"})
    world.step({"agent_C": "pick map"})
    events = world.step({"agent_A": "pick map", "agent_C": "wait"})
    # agent_B idles too: the lamp still lies in its vault; agent_C carries the map, nothing to fetch.
    assert [(e.kind, e.agent) for e in events] == [("conflict", "agent_A"), ("idle", "agent_B")]
    assert world._holding["agent_C"] == "map"


def test_opening_the_door_too_early_is_invalid():
    world = make("escape-room")
    world.reset(1)
    reason = world.check("agent_A", Directive("agent_A: open the door", "agent_A", "use:door"))
    assert reason == "the map is not at the door"


def test_step_limit_fails_and_the_world_stays_finished():
    world = make("escape-room", max_steps=3)
    world.reset(0)
    kinds = [[e.kind for e in world.step({})] for _ in range(3)]
    assert kinds[-1][-1] == "failure" and world.outcome() == "failure"
    assert world.step({"agent_A": "move vault"}) == [] and world.outcome() == "failure"


def test_heldout_names_share_no_word_with_default():
    default, heldout = make("escape-room"), make("escape-room", names="heldout", agents=6, items=5, zones=6)
    heldout.reset(3)
    words = set(sum((VOCAB["default"][k] for k in VOCAB["default"]), []))
    text = heldout.task + " " + heldout.describe() + " ".join(d.text for d in heldout.directives())
    assert not words & set(text.replace(".", " ").replace(",", " ").replace(":", " ").split())
    assert default.agents == ["agent_A", "agent_B", "agent_C"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"agents": 0}, "agents=0 is out of range; allowed: 2..6"),
        ({"items": 5, "zones": 3}, "items=5 is out of range; allowed: 2..5 and at most zones=3"),
        ({"names": "klingon"}, "names='klingon' is not allowed; allowed: default, heldout, fresh"),
        ({"compliance": 1.5}, "compliance=1.5 is out of range; allowed: 0.0..1.0"),
        ({"max_steps": 0}, "max_steps=0 is out of range"),
        ({"agents": "three"}, "agents='three' is not an integer; allowed: 2..6"),
        ({"agents": 2.5}, "agents=2.5 is not an integer; allowed: 2..6"),
        ({"agents": True}, "agents=True is not an integer; allowed: 2..6"),
    ],
)
def test_bad_options_name_the_key_the_value_and_what_is_allowed(options, message):
    with pytest.raises(TeamTRError, match=message.replace("(", r"\(").replace(".", r"\.")):
        make("escape-room", **options)


def test_task_text_is_static_across_episodes():
    world = make("escape-room", agents=4)
    world.reset(0)
    first = world.task
    world.reset(99)
    assert world.task == first and "Fail after 14 ticks" in first


def test_generic_task_text_names_nothing_and_is_one_text_for_every_episode_name_set_and_team():
    """task_text: generic: one static prefix for fresh names, held-out names and other team sizes (the
    state lists agents and items); the episodes are those of the full text, step for step."""
    tasks = set()
    for options in ({}, {"names": "heldout"}, {"agents": 2, "items": 2}):
        world = make("escape-room", names=options.get("names", "fresh"), task_text="generic",
                     **{k: v for k, v in options.items() if k != "names"})
        for seed in range(20):
            world.reset(seed)
            assert not any(name in world.task for name in world.agents + world.items + world.zones)
            tasks.add(world.task)
    assert tasks == {"Escape room. Bring every item to the door in the hall, then one agent opens "
                     "the door. Each room admits one agent only. An agent keeps its directive until given a new "
                     "one. Fail after 14 ticks."}
    full, generic = make("escape-room", names="fresh"), make("escape-room", names="fresh", task_text="generic")
    full.reset(0)
    assert "Team: " in full.task
    assert_same_play_but_the_task(full, generic, range(10))
    other = make("escape-room", agents=2, items=3, task_text="generic")  # another step limit: its own text
    assert other.task == next(iter(tasks)).replace("14 ticks", "20 ticks")
    with pytest.raises(TeamTRError, match="task_text='short' is not allowed; allowed: full, generic"):
        make("escape-room", task_text="short")


def _renamed(text, fresh, default):
    """``text`` with each fresh name put back to the default name in the same position."""
    pairs = [(f, d) for kind in ("agents", "items", "zones")
             for f, d in zip(getattr(fresh, kind), getattr(default, kind))]
    table = dict(pairs)
    pattern = "|".join(map(re.escape, sorted(table, key=len, reverse=True)))  # one pass, longest first
    return re.sub(pattern, lambda m: table[m.group(0)], text)


def test_fresh_names_are_drawn_per_seed_and_the_same_seed_gives_the_same_names():
    one, two = make("escape-room", names="fresh"), make("escape-room", names="fresh")
    tasks = set()
    for seed in range(100):
        one.reset(seed)
        two.reset(seed)
        assert (one.task, one.describe(), one.directives()) == (two.task, two.describe(), two.directives())
        names = one.agents + one.items + one.zones
        assert len(set(names)) == 3 + 3 + 4
        assert not set(names) & {n for v in VOCAB.values() for kind in v.values() for n in kind}
        assert not any(a != b and b.startswith(a) for a in names for b in names)
        tasks.add(one.task)
    assert len(tasks) == 100


def test_every_drawn_name_avoids_every_heldout_and_default_word():
    fixed = {w for v in VOCAB.values() for names in v.values() for n in names for w in n.lower().split("_")}
    fixed -= {"agent"}
    team = Team(make("escape-room", names="fresh", agents=6, items=5, zones=6))
    for seed in range(200):
        state = team.reset(seed)  # one Team over many seeds: its scripted agents follow the renaming
        world = team.world
        assert list(team.agents) == world.agents
        for name in world.agents + world.items + world.zones:
            assert not fixed & set(name.lower().replace("_", " ").split()), name
        assert all(f"the {item}" in state.task for item in world.items)
        assert not {c for a in world.agents for c in a[len("agent_"):]} & set("ABCDEFPQRSTU")


def test_a_fresh_episode_is_the_default_episode_renamed():
    rng = random.Random(0)
    fixed = words(VOCAB["default"]["items"] + VOCAB["default"]["zones"])
    for seed in range(30):
        options = {"agents": 4, "items": 4}
        default, fresh = Team(make("escape-room", **options)), Team(make("escape-room", **options, names="fresh"))
        a, b, done = default.reset(seed), fresh.reset(seed), False
        while not done:
            assert _renamed(b.state, fresh.world, default.world) == a.state
            renamed = [_renamed(c.text, fresh.world, default.world) for c in b.candidates]
            assert renamed == [c.text for c in a.candidates]
            assert a.expert == b.expert and len(a.candidates) == len(b.candidates)
            assert [_renamed(h, fresh.world, default.world) for h in b.history] == list(a.history)
            texts = [b.task, b.state, *b.history, *(c.text for c in b.candidates)]
            assert not words(texts) & fixed and not any(n in t for n in default.world.agents for t in texts)
            pick = a.expert if seed % 2 else rng.randrange(len(a.candidates))  # oracle and random play
            a, ra, done, _ = default.step(pick)
            b, rb, done_b, _ = fresh.step(pick)
            assert (ra, done) == (rb, done_b)


def test_oracle_wins_with_fresh_names_and_random_matches_default_names():
    seeds = range(200)
    for options in ({}, {"agents": 6, "items": 5, "zones": 6}, {"hints": True}):
        fresh = {**options, "names": "fresh"}
        assert summarize(run_episodes("escape-room", fresh, baseline("oracle"), seeds))["success"] == 1.0
        rate = {o.get("names", "default"): summarize(
            run_episodes("escape-room", o, baseline("random"), seeds))["success"] for o in (options, fresh)}
        assert rate["fresh"] == rate["default"] <= 0.25  # the same episodes, renamed
