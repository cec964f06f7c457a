"""Worlds from outside the package: "module:Class" paths, classes, entry points, own event kinds,
the declared generalisation options, truncation, and the example relay world through the CLI."""

from pathlib import Path

import pytest

from teamtr.cli import main
from teamtr.core import AgentView, Directive, Event, TeamTRError
from teamtr.envs import available, info, make, names, options, register, spec, world_class
from teamtr.envs.registry import _CLASSES, _REGISTRY
from teamtr.eval import baseline, run_episodes, summarize
from teamtr.eval.suites import suites
from teamtr.team import Team

RELAY = Path(__file__).resolve().parent.parent / "examples" / "relay"
RELAY_PATH = "relay_world.world:RelayWorld"


@pytest.fixture
def relay_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(RELAY))
    yield RELAY_PATH


def test_a_world_by_module_class_path_plays_an_episode_with_its_own_event_kind(relay_on_path):
    world = make(relay_on_path, runners=4)
    assert world.name == "relay" and world.agents == ["runner_1", "runner_2", "runner_3", "runner_4"]
    assert options(relay_on_path) == {"runners": 3, "max_steps": None}
    assert spec(relay_on_path).description.startswith("Runners pass a baton along in order")
    team = Team(world)
    state = team.reset(0)
    kinds, rewards = [], []
    while True:
        state, reward, done, step = team.step(state.expert)
        kinds += [e.kind for e in step["events"]]
        rewards.append(reward)
        if done:
            break
    assert step["outcome"] == "success" and step["terminated"] and not step["truncated"]
    assert kinds.count("handoff") == 3 and kinds.count("directive_done") == 4
    # "handoff" counts in no reward term: 3 decisions of one followed directive each, then success.
    assert rewards == pytest.approx([0.0, 0.0, 0.0, 10.0])


def test_a_worlds_own_event_kinds_are_counted_per_kind_and_the_table_keys_stay_fixed(relay_on_path):
    oracle = summarize(run_episodes(relay_on_path, {"runners": 3}, baseline("oracle"), range(4)))
    noop = summarize(run_episodes(relay_on_path, {"runners": 3}, baseline("noop"), range(4)))
    assert oracle["success"] == 1.0 and oracle["events/handoff"] == 2.0
    assert noop["success"] == 0.0 and "events/handoff" not in noop
    assert set(oracle) - {"events/handoff"} == set(noop)


@pytest.mark.parametrize("path, message", [
    ("no_such_pkg.worlds:Relay", r"cannot import module 'no_such_pkg.worlds'.*PYTHONPATH"),
    ("relay_world.world:Relai", r"module 'relay_world.world' has no class 'Relai'"),
    ("relay_world.world:Event", r"class Event does not look like a teamtr World; it lacks name, "
                                r"team_size_option, vocabulary_option, reset"),
    ("relay_world.world:", r"'relay_world.world:' is not a \"module:Class\" path"),
])
def test_a_bad_path_says_what_is_wrong(relay_on_path, path, message):
    with pytest.raises(TeamTRError, match=message):
        make(path)
    assert path not in _CLASSES


def test_register_takes_a_class_named_by_its_attribute_and_docstring():
    class Tiny(world_class("escape-room")):
        """A two-agent escape room.

        More words that are not the description.
        """

        name = "tiny-escape"

    try:
        found = register(Tiny)
        assert (found.name, found.description) == ("tiny-escape", "A two-agent escape room.")
        assert "tiny-escape" in names() and info("tiny-escape") == "A two-agent escape room."
        assert isinstance(make("tiny-escape", agents=2), Tiny)
    finally:
        _REGISTRY.pop("tiny-escape", None)
        _CLASSES.pop("tiny-escape", None)
    with pytest.raises(TeamTRError, match="lacks .*reset"):
        register(type("Half", (), {"name": "half", "team_size_option": None, "vocabulary_option": None}))


def _dist(root: Path, entries: str) -> None:
    """A dist-info folder with ``entries`` as its entry_points.txt: what pip install would leave."""
    info_dir = root / "relay_plugin-0.1.dist-info"
    info_dir.mkdir(parents=True)
    (info_dir / "METADATA").write_text("Metadata-Version: 2.1\nName: relay-plugin\nVersion: 0.1\n")
    (info_dir / "entry_points.txt").write_text(entries)


def test_entry_point_worlds_are_listed_loaded_lazily_and_a_broken_one_breaks_nothing(
        tmp_path, relay_on_path, monkeypatch, capsys):
    _dist(tmp_path, "[teamtr.worlds]\nrelay = relay_world:RelayWorld\nbroken = teamtr_no_such_plugin:World\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert names()[:4] == ["escape-room", "software-team", "overcooked", "spread"]
    assert names()[4:] == ["relay", "broken"]
    assert make("relay").agents == ["runner_1", "runner_2", "runner_3"]
    assert info("broken").startswith("cannot be loaded: World 'broken': cannot import module "
                                     "'teamtr_no_such_plugin'")
    assert main(["envs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("relay ") and "Runners pass a baton" in line for line in out)
    assert any(line.startswith("broken ") and "cannot be loaded" in line for line in out)
    _CLASSES.pop("relay", None)


def test_the_generalisation_suite_reads_the_options_each_world_declares(relay_on_path):
    assert suites(relay_on_path, {"runners": 2}, "generalisation") == {
        "heldout": {"runners": 2}, "runners=3": {"runners": 3}}
    assert suites("escape-room", {}, "generalisation") == {
        "heldout": {}, "agents=4": {"agents": 4}, "names=heldout": {"names": "heldout"}}
    assert suites("software-team", {"engineers": 3}, "generalisation") == {
        "heldout": {"engineers": 3}, "engineers=4": {"engineers": 4},
        "names=heldout": {"engineers": 3, "names": "heldout"}}
    # a run evaluated on held-out names already (train.eval_env) gets no second copy of that suite
    assert suites("escape-room", {"names": "heldout"}, "generalisation") == {
        "heldout": {"names": "heldout"}, "agents=4": {"agents": 4, "names": "heldout"}}
    for extra_world, want in (("spread", ["heldout", "N=4"]), ("overcooked", ["heldout"])):
        if available(extra_world):
            assert list(suites(extra_world, {}, "generalisation")) == want


class Clock:
    """A one-agent world that ends after ``horizon`` ticks; its limit is a cut or the task's."""

    name = "clock"
    team_size_option = None
    vocabulary_option = None

    def __init__(self, horizon: int = 3, cut: bool = True) -> None:
        self.horizon, self.cut, self.agents, self.task = horizon, cut, ["hand"], "tick along"

    def reset(self, seed: int) -> None:
        self.t = 0

    def describe(self) -> str:
        return f"tick {self.t}"

    def view(self, agent: str) -> AgentView:
        return AgentView(agent, self.describe(), ("wait",))

    def directives(self) -> list[Directive]:
        return []

    def check(self, agent: str, directive: Directive) -> str | None:
        return None

    def plan(self, agent: str, directive: Directive | None) -> str:
        return "wait"

    def done(self, agent: str, directive: Directive) -> bool:
        return True

    def step(self, actions: dict[str, str]) -> list[Event]:
        self.t += 1
        return [Event("failure")] if self.t >= self.horizon else []

    def outcome(self):
        return "failure" if self.t >= self.horizon else None

    def truncated(self) -> bool:
        return self.cut and self.t >= self.horizon

    def expert_directive(self) -> Directive:
        from teamtr.core import NOOP

        return NOOP

    def decision_due(self) -> bool:
        return True


@pytest.mark.parametrize("cut", [True, False])
def test_team_reports_a_cut_as_truncated_and_a_task_limit_as_terminated(cut):
    team = Team(Clock(horizon=3, cut=cut))
    team.reset(0)
    ends = [team.step(0) for _ in range(3)]
    assert [done for _, _, done, _ in ends] == [False, False, True]
    assert [(i["terminated"], i["truncated"]) for *_, i in ends[:2]] == [(False, False)] * 2
    assert (ends[-1][3]["terminated"], ends[-1][3]["truncated"]) == ((False, True) if cut else (True, False))


def test_escape_room_running_out_of_steps_terminates():
    team = Team(make("escape-room", max_steps=2))
    state = team.reset(0)
    first = team.step(len(state.candidates) - 1)[3]
    last = team.step(len(state.candidates) - 1)[3]
    assert (first["terminated"], first["truncated"]) == (False, False)
    assert (last["outcome"], last["terminated"], last["truncated"]) == ("failure", True, False)


def test_the_example_world_trains_and_evaluates_from_the_cli(relay_on_path, tmp_path, capsys):
    run_dir = tmp_path / "relay-run"
    assert main(["train", "--config", str(RELAY / "relay.yaml"), "--set", "model.backbone=tiny-random",
                 "--set", f"run_dir={run_dir}", "--set", "train.iterations=1", "--set", "algo.epochs=1", "--set", "train.final_eval_episodes=2",
                 "--set", "train.final_zero_shot_episodes=2"]) == 0
    out = capsys.readouterr().out
    assert "relay_world:RelayWorld: held-out seeds from 1000000" in out
    assert (run_dir / "checkpoints").is_dir() and (run_dir / "final_eval.json").is_file()
    assert main(["eval", "--checkpoint", str(run_dir), "--episodes", "4", "--policy", "trained", "oracle",
                 "--suite", "generalisation", "--json", str(tmp_path / "eval.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("relay_world:RelayWorld (runners=3), 4 episodes from seed ")
    rows = {line.split(" @ ")[0] + " @ " + line.split(" @ ")[1].split()[0]: line.split()
            for line in lines[2:] if " @ " in line}
    assert set(rows) == {f"{p} @ {s}" for p in ("trained", "oracle") for s in ("heldout", "runners=4")}
    assert rows["oracle @ runners=4"][3] == "1.000"  # the oracle always succeeds: success column
