"""software-team: dependency graph, pairing, conflicts, duplicates, bugs, goals, the oracle."""

import pytest

from teamtr.core import Directive, TeamTRError
from teamtr.envs import make
from teamtr.team import Team


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
        ({"names": "x"}, "names='x' is not allowed; allowed: default, heldout"),
    ],
)
def test_bad_options_name_the_key_the_value_and_what_is_allowed(options, message):
    with pytest.raises(TeamTRError, match=message.replace(".", r"\.")):
        make("software-team", **options)
