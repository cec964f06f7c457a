"""escape-room: text, candidates, access rules, the oracle and option errors."""

import pytest

from teamtr.core import Directive, TeamTRError
from teamtr.envs import make
from teamtr.envs.escape_room import VOCAB
from teamtr.team import Team


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
        ({"names": "klingon"}, "names='klingon' is not allowed; allowed: default, heldout"),
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
