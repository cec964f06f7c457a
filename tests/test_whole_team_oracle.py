"""The whole-team oracle (``TeamState.expert_lines``): every agent with something new to do gets its
line in the same decision; it is what whole-team cloning demonstrates and the oracle row of a
whole-team run's table."""

import statistics
from pathlib import Path

import pytest

from teamtr.core import NOOP, Directive, TeamExpertWorld, TeamTRError

from teamtr.envs import make
from teamtr.eval.policies import build_policies
from teamtr.policy.whole_team import team_grammar
from teamtr.team import Team, expert_lines
from teamtr.train import bc as bc_mod


def _play(world, options, seed, whole):
    team = Team(make(world, **options), history_len=1)
    state, done, events, decisions = team.reset(seed), False, [], 0
    while not done:
        if whole:
            targets = [state.candidates[k].target for k in state.expert_lines]
            assert len(targets) == len(set(targets)) and None not in targets  # one line per agent, at most
            assert all("+" not in t for t in targets)  # no allocation: it has no whole-team line
        state, _, done, info = team.step(list(state.expert_lines) if whole else state.expert)
        events += info["events"]
        decisions += 1
    return info["outcome"], decisions, events


@pytest.mark.parametrize("world,options", [("escape-room", {"agents": 3}), ("escape-room", {"agents": 4}),
                                           ("escape-room", {"agents": 2, "items": 4})])
def test_the_escape_room_whole_team_oracle_wins_in_fewer_decisions(world, options):
    single = [_play(world, options, seed, whole=False) for seed in range(60)]
    whole = [_play(world, options, seed, whole=True) for seed in range(60)]
    assert all(o == "success" for o, _, _ in whole)
    assert not any(e.kind == "conflict" for _, _, events in whole for e in events)
    # 3 agents: 9 decisions a seed -> 7; it directs several agents in one decision, so never more
    assert all(w[1] <= s[1] for w, s in zip(whole, single))
    assert statistics.mean(w[1] for w in whole) < statistics.mean(s[1] for s in single)


@pytest.mark.parametrize("engineers", [1, 2, 4])
def test_the_software_team_whole_team_oracle_ships_without_pairs_or_conflicts(engineers):
    for seed in range(40):
        outcome, _, events = _play("software-team", {"engineers": engineers, "bug_rate": 0.5}, seed, whole=True)
        assert outcome == "success"
        assert not any(e.kind in ("conflict", "duplicate") for e in events)


def test_asking_the_whole_team_oracle_leaves_the_world_as_it_was():
    team = Team(make("escape-room", agents=3), history_len=1)
    state = team.reset(5)
    seen = 0
    for _ in range(6):
        again = team._observe()  # asks the oracle once more, on the same tick
        assert (again.state, again.expert, again.expert_lines) == (state.state, state.expert, state.expert_lines)
        seen = max(seen, len(state.expert_lines))
        state, *_ = team.step(state.expert)
    assert seen >= 2  # some state had several agents to direct


def test_worlds_with_a_whole_team_oracle_and_the_fallback(monkeypatch):
    # MPE spread: every agent off its optimal landmark gets a line in the first decision
    team = Team(make("spread"), history_len=1)
    state = team.reset(0)
    assert len(state.expert_lines) == len(team.world.agents) >= 2 and state.expert in state.expert_lines
    # Overcooked: each chef whose wanted sub-task is new gets its line, the one-directive heuristic's among them
    team = Team(make("overcooked", layout="cramped_room"), history_len=1)
    state = team.reset(0)
    assert len(state.expert_lines) == 2 and state.expert in state.expert_lines
    # a world without expert_directives (a plug-in): its one-directive oracle's line
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "examples" / "relay"))
    from relay_world.world import RelayWorld

    team = Team(RelayWorld(), history_len=1)
    state = team.reset(0)
    assert not isinstance(team.world, TeamExpertWorld) and state.expert_lines == (state.expert,)


def test_a_line_that_is_no_candidate_is_an_error_naming_both_methods():
    world = make("escape-room", agents=3)
    world.reset(0)
    bogus = Directive("agent_A: dance", "agent_A", "dance:floor")
    with pytest.raises(TeamTRError, match="'agent_A: dance'.*directives\\(\\) and expert_directives\\(\\) disagree"):
        expert_lines(type("W", (), {"name": "w", "expert_directives": lambda self: [bogus]})(),
                     (*world.directives(), NOOP), 0)


def test_software_teams_oracle_bookkeeping_is_restored():
    team = Team(make("software-team", engineers=4, bug_rate=0.5), history_len=1)
    state = team.reset(3)
    while not team.finished:
        before = (dict(team.world._doing), team.world._goal, team.world.describe())
        assert team.world.expert_directives() == [state.candidates[k] for k in state.expert_lines]
        assert (dict(team.world._doing), team.world._goal, team.world.describe()) == before
        state, *_ = team.step(list(state.expert_lines))


def test_the_oracle_row_directs_the_whole_team_outside_single_mode():
    states = [Team(make("escape-room", agents=3), history_len=1).reset(s) for s in range(8)]
    single = build_policies(["oracle"], directives="single")["oracle"].choose(states)
    whole = build_policies(["oracle"], directives="whole_team")["oracle"].choose(states)
    assert single == [s.expert for s in states]
    assert whole == [list(s.expert_lines) for s in states]
    assert any(len(w) >= 2 for w in whole)  # the first tick: several agents have an item to fetch


def test_whole_team_demonstrations_clone_the_oracles_lines():
    make_team = lambda: Team(make("escape-room", agents=3), history_len=1)  # noqa: E731
    demos = bc_mod.expert_demos(make_team, 60, seed=0, parallel=4, mode="whole_team")
    several = 0
    for d in demos:
        assert d.lines is not None and bc_mod.expressible(d)
        _, sources = team_grammar(bc_mod.whole_team_view(d))
        choice = bc_mod.whole_team_label(d, sources)
        written = sorted(sources[a][o] for a, o in enumerate(choice) if sources[a][o] >= 0)
        assert written == sorted(d.lines)  # the oracle's lines, every other line carrying on
        several += len(d.lines) >= 2
    assert several >= 5
    # the collecting episodes follow the lines: 60 decisions span more episodes than single mode's
    single = bc_mod.expert_demos(make_team, 60, seed=0, parallel=4)
    assert sum(d.history == () for d in demos) > sum(d.history == () for d in single)
