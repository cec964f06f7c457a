"""software-team: dependency graph, pairing, conflicts, duplicates, bugs, goals, the oracle."""

import random
import re

import pytest

from teamtr.core import Directive, TeamTRError
from teamtr.envs import make, vocabulary
from teamtr.envs.software_team import VOCAB
from teamtr.eval import baseline, run_episodes, summarize
from teamtr.team import Team
from team_play import assert_same_play_but_the_task


def world_at_modules(**options):
    """A world whose PRD and design are done: the API and UI modules are ready."""
    world = make("software-team", **options)
    world.reset(0)
    for _ in range(2):
        world.step({"product_manager": "work prd"})
    for _ in range(2):
        world.step({"architect": "work design"})
    return world


def test_first_state_offers_each_agent_its_skill_work_the_goals_and_the_noop():
    team = Team(make("software-team"))
    state = team.reset(0)
    texts = [c.text for c in state.candidates]
    assert texts[:3] == ["product_manager: write the PRD", "product_manager: ship the release",
                         "architect: write the design"]
    assert texts[3:10:3] == ["engineer_1: implement the API module", "engineer_2: implement the API module",
                             "qa: run the tests"]
    assert texts[10:] == ["focus: integration before new features", "focus: new features first",
                          "no new directive"]
    assert state.expert == 0
    assert state.state.startswith("tick 0 of 18. PRD: 0/2. waiting: design, API module, UI module")
    _, _, _, info = team.step(3)  # the API before the design: invalid, a wasted tick
    assert info["events"][0].kind == "directive_invalid" and info["terms"]["invalid"] == -0.5


def test_oracle_ships_in_12_ticks_or_15_after_a_bug():
    lengths = set()
    for seed in range(60):
        team = Team(make("software-team"))
        state, done = team.reset(seed), False
        while not done:
            state, _, done, info = team.step(state.expert)
        assert info["outcome"] == "success"
        lengths.add(state.tick)
    assert lengths == {12, 15}


def test_paired_engineers_work_twice_as_fast_without_conflict():
    world = world_at_modules()
    events = world.step({"engineer_1": "pair api", "engineer_2": "pair api"})
    assert world._progress["api"] == 2 and not [e for e in events if e.kind == "conflict"]


def test_two_engineers_on_one_module_without_pairing_conflict_and_gain_nothing():
    world = world_at_modules()
    events = world.step({"engineer_1": "work api", "engineer_2": "work api"})
    assert world._progress["api"] == 1
    assert [(e.kind, e.agent) for e in events if e.kind == "conflict"] == [("conflict", "engineer_2")]


def test_redoing_finished_work_is_a_duplicate_and_never_ends():
    world = world_at_modules()
    redo = Directive("product_manager: write the PRD", "product_manager", "redo:prd")
    assert redo in world.directives()
    events = world.step({"product_manager": world.plan("product_manager", redo)})
    assert [e.kind for e in events].count("duplicate") == 1
    assert world.done("product_manager", redo) is False


def test_feature_goal_sends_idle_engineers_to_the_same_module():
    team = Team(make("software-team"))
    team.reset(0)
    world = team.world
    for _ in range(2):
        world.step({"product_manager": "work prd"})
    for _ in range(2):
        world.step({"architect": "work design"})
    state = team.state = team._observe()  # the world moved on under the team: look again
    goal = [c.text for c in state.candidates].index("focus: new features first")
    state, _, _, info = team.step(goal)
    assert [e.kind for e in info["events"]].count("conflict") == 1
    assert "engineer_1: work API module. engineer_2: work API module." in state.state
    assert "goal: focus: new features first." in state.state


def test_a_bug_sends_a_module_back_and_the_tests_must_run_again():
    world = make("software-team", bug_rate=1.0)
    world.reset(0)
    plan = [("product_manager", "prd", 2), ("architect", "design", 2), ("engineer_1", "api", 3),
            ("engineer_1", "ui", 3), ("engineer_1", "integration", 2), ("qa", "tests", 2)]
    for agent, item, ticks in plan:
        for _ in range(ticks):
            events = world.step({agent: f"work {item}"})
    assert world._bug in ("api", "ui") and not world._done["tests"]
    assert "bug found" in world.describe() and "tests found a bug" in events[-1].detail
    fix = world.expert_directive()
    assert fix.text == f"engineer_1: fix the {world.vocab['names'][world._bug]} bug"


def test_skills_and_dependencies_make_directives_invalid():
    world = make("software-team")
    world.reset(0)
    wrong_skill = Directive("architect: implement the API module", "architect", "do:api")
    too_early = Directive("engineer_1: implement the API module", "engineer_1", "do:api")
    assert world.check("architect", wrong_skill) == "architect is not a engineer"
    assert world.check("engineer_1", too_early) == "waits for design"


def test_heldout_vocabulary_is_disjoint():
    default, heldout = make("software-team"), make("software-team", names="heldout")
    default.reset(0)
    heldout.reset(0)
    words = lambda w: set((w.task + " " + w.describe()).replace(".", " ").replace(",", " ").split())
    shared = words(default) & words(heldout)
    assert not shared & {"PRD", "design", "API", "UI", "product_manager", "engineer_1", "qa", "release"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"engineers": 0}, "engineers=0 is out of range; allowed: 1..4"),
        ({"engineers": 5}, "engineers=5 is out of range; allowed: 1..4"),
        ({"bug_rate": -0.1}, "bug_rate=-0.1 is out of range"),
        ({"names": "x"}, "names='x' is not allowed; allowed: default, heldout, fresh"),
    ],
)
def test_bad_options_name_the_key_the_value_and_what_is_allowed(options, message):
    with pytest.raises(TeamTRError, match=message.replace(".", r"\.")):
        make("software-team", **options)


def _renamed(text, fresh, default):
    """``text`` with each fresh word put back to the default word of the same key."""
    pairs = [(fresh.vocab[part][k], default.vocab[part][k]) for part in ("goals", "verbs", "names", "roles")
             for k in fresh.vocab[part]]
    pairs += list(zip(fresh.agents, default.agents))
    table = dict(pairs)
    pattern = "|".join(map(re.escape, sorted(table, key=len, reverse=True)))  # one pass, longest first
    return re.sub(pattern, lambda m: table[m.group(0)], text)


def test_fresh_words_are_drawn_per_seed_and_the_same_seed_gives_the_same_words():
    one, two = make("software-team", names="fresh", engineers=4), make("software-team", names="fresh", engineers=4)
    tasks = set()
    default_words = {w for part in VOCAB["default"].values() for w in part.values()}
    heldout_words = {w for part in VOCAB["heldout"].values() for w in part.values()}
    for seed in range(100):
        one.reset(seed)
        two.reset(seed)
        assert (one.task, one.describe(), one.directives()) == (two.task, two.describe(), two.directives())
        assert len(set(one.agents)) == 7 and not set(one.agents) & {*default_words, *heldout_words}
        assert not {w for part in one.vocab.values() for w in part.values()} & {*default_words, *heldout_words}
        tasks.add(one.task)
    assert len(tasks) == 100


def test_a_fresh_episode_is_the_default_episode_renamed():
    rng = random.Random(0)
    own_default = vocabulary.words(t for part in VOCAB["default"].values() for t in part.values()) - {"the", "first"}
    team = Team(make("software-team", names="fresh"))  # one Team over many seeds
    for seed in range(30):
        default = Team(make("software-team"))
        a, b, done = default.reset(seed), team.reset(seed), False
        assert list(team.agents) == team.world.agents
        while not done:
            assert _renamed(b.state, team.world, default.world) == a.state
            assert _renamed(b.task, team.world, default.world) == a.task
            renamed = [_renamed(c.text, team.world, default.world) for c in b.candidates]
            assert renamed == [c.text for c in a.candidates]
            assert a.expert == b.expert and len(a.candidates) == len(b.candidates)
            assert [_renamed(h, team.world, default.world) for h in b.history] == list(a.history)
            assert not vocabulary.words(b.history) & own_default, b.history  # no fixed word leaks into the texts
            texts = [b.state, *(c.text for c in b.candidates[:-1])]  # the task and the no-op: fixed template
            assert not vocabulary.words(texts) & own_default
            pick = a.expert if seed % 2 else rng.randrange(len(a.candidates))  # oracle and random play
            a, ra, done, _ = default.step(pick)
            b, rb, done_b, _ = team.step(pick)
            assert (ra, done) == (rb, done_b)


def test_oracle_wins_with_fresh_words_and_random_matches_default_words():
    seeds = range(200)
    for options in ({}, {"engineers": 4}):
        fresh = {**options, "names": "fresh"}
        assert summarize(run_episodes("software-team", fresh, baseline("oracle"), seeds))["success"] == 1.0
        rate = [summarize(run_episodes("software-team", o, baseline("random"), seeds))["success"]
                for o in (options, fresh)]
        assert rate[0] == rate[1] <= 0.25  # the same episodes, renamed


def test_generic_task_text_names_nothing_and_is_one_text_for_every_episode_and_name_set():
    """task_text: generic: one static prefix for fresh and held-out names (the state lists the agents and
    the work); no word of either fixed vocabulary or of the episode's own draw; the episodes are those of
    the full text, step for step."""
    fixed = vocabulary.forbidden_words(*([t for part in VOCAB[v].values() for t in part.values()]
                                         for v in ("default", "heldout")))
    tasks = set()
    for names in ("fresh", "heldout", "default"):
        world = make("software-team", names=names, task_text="generic")
        for seed in range(20):
            world.reset(seed)
            own = vocabulary.words([t for part in world.vocab.values() for t in part.values()] + world.agents)
            task = set(re.split(r"[^a-z0-9]+", world.task.lower()))
            assert not task & (fixed | own) - vocabulary.RESERVED - {""}  # scaffolding: "tick", "bug", "the"
            tasks.add(world.task)
    assert len(tasks) == 1 and "Finish by tick 18." in next(iter(tasks))
    full, generic = make("software-team", names="fresh"), make("software-team", names="fresh", task_text="generic")
    full.reset(0)
    assert "Work order: " in full.task
    assert_same_play_but_the_task(full, generic, range(10))
    assert "Finish by tick 17." in make("software-team", engineers=4, task_text="generic").task  # its own deadline
    with pytest.raises(TeamTRError, match="task_text='short' is not allowed; allowed: full, generic"):
        make("software-team", task_text="short")
