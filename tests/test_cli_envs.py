"""The registry and the ``teamtr envs | eval | play`` commands (the gymnasium ids: test_gym.py)."""

import io
import json

import pytest

from teamtr.cli import main
from teamtr.core import TeamTRError
from teamtr.envs import info, make, names, register
from teamtr.envs.registry import _REGISTRY, WorldSpec
from teamtr.team import Team


@pytest.fixture
def missing_extra():
    """A world whose extra is not installed (registered for the test only)."""
    register(WorldSpec("ghost", "teamtr_ghost_world:Ghost", "a world needing a missing package",
                       extra="ghost", requires="teamtr_ghost_world"))
    yield "ghost"
    del _REGISTRY["ghost"]


def test_registry_lists_builtin_and_extra_worlds():
    assert names()[:4] == ["escape-room", "software-team", "overcooked", "spread"]


def test_unknown_world_lists_the_known_ones():
    with pytest.raises(TeamTRError, match="Unknown world 'kitchen'; known worlds: escape-room, software-team, overcooked, spread"):
        make("kitchen")


def test_unknown_option_lists_the_allowed_ones():
    with pytest.raises(TeamTRError, match="no option 'players'; allowed options: engineers, names, bug_rate, deadline, compliance"):
        make("software-team", players=3)


def test_missing_extra_names_the_pip_install(missing_extra, capsys):
    assert info(missing_extra).endswith("[extra ghost: needs pip install 'teamtr[ghost]']")
    with pytest.raises(TeamTRError, match=r"run pip install 'teamtr\[ghost\]'"):
        make(missing_extra)
    assert main(["envs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("escape-room    agents bring items out of rooms")
    assert any(line.startswith("ghost") and "needs pip install 'teamtr[ghost]'" in line for line in out)


def test_eval_prints_a_table_and_json(capsys, tmp_path):
    out_file = tmp_path / "eval.json"
    assert main(["eval", "--policy", "oracle", "noop", "--episodes", "20", "--seed", "0", "--set",
                 "env.agents=4", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("escape-room (") and "agents=4" in out[0]
    assert out[0].endswith("20 episodes from seed 0")
    assert out[1].split()[:3] == ["policy", "success", "return"]
    rows = json.loads(out_file.read_text())["rows"]
    assert rows["oracle"]["success"] == 1.0 and rows["noop"]["success"] == 0.0
    assert rows["oracle"]["length"] == 9.0


def test_generalisation_suite_adds_an_agent_and_heldout_names(capsys):
    assert main(["eval", "--policy", "oracle", "--episodes", "10", "--suite", "generalisation"]) == 0
    out = capsys.readouterr().out
    assert "oracle @ heldout" in out and "oracle @ agents=4" in out and "oracle @ names=heldout" in out


def test_eval_errors_are_one_line_for_people(capsys):
    assert main(["eval", "--env", "nope"]) == 2
    assert "Unknown world 'nope'" in capsys.readouterr().err
    assert main(["eval", "--set", "env.agents=0"]) == 2
    assert "agents=0 is out of range; allowed: 2..6" in capsys.readouterr().err
    assert main(["eval", "--set", "agents"]) == 2
    assert "is not of the form key.path=value" in capsys.readouterr().err
    assert main(["eval", "--set", "env.agentz=4"]) == 2
    assert "agentz" in capsys.readouterr().err


def test_play_lets_a_person_coordinate(monkeypatch, capsys):
    team = Team(make("escape-room"), history_len=1)  # the oracle's directives for seed 1, typed as text
    state, done, moves = team.reset(1), False, ["x"]
    while not done:
        moves.append(state.candidates[state.expert].text)
        state, _, done, _ = team.step(state.expert)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(moves) + "\n"))
    assert main(["play", "escape-room", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert ". agent_C: fetch the map" in out and "'x' is no directive now" in out
    assert "episode over: success after 9 ticks" in out


def test_envs_lists_options_with_defaults_and_derived_ones_as_auto(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "deadline=auto" in out and "bug_rate=0.5" in out
    assert "goal_soups=auto" in out and "None" not in out
