"""The shipped configs: each loads by name from any directory, validates, and builds its world."""

import pytest

from teamtr.core import TeamTRError
from teamtr.config import CONFIGS_DIR, config_path, dump_config, load_config, load_yaml, shipped_configs
from teamtr.envs import make


def test_the_shipped_configs_are_inside_the_package():
    assert {"default", "escape_room_ppo", "software_team"} <= set(shipped_configs())
    assert all((CONFIGS_DIR / f"{name}.yaml").is_file() for name in shipped_configs())


@pytest.mark.parametrize("name", shipped_configs())
def test_each_shipped_config_loads_by_name_anywhere_and_round_trips(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the clone: no configs/ folder here
    config = load_config(name)
    assert config_path(name) == CONFIGS_DIR / f"{name}.yaml"
    make(config.env.name, **config.env.options())
    dumped = tmp_path / "resolved.yaml"
    dumped.write_text(dump_config(config))
    assert load_config(dumped) == config
    assert load_yaml(dumped.read_text())["model"]["dtype"] == "auto"  # precision follows the hardware


def test_an_override_of_the_world_starts_env_afresh():
    config = load_config("default", ["env.name=software-team", "env.engineers=3"])
    assert config.env.name == "software-team" and config.env.options() == {"engineers": 3}
    kept = load_config("default", ["env.agents=4"])
    assert kept.env.options() == {"agents": 4, "items": 3}


def test_a_config_starts_from_its_base_and_overrides_key_by_key(tmp_path):
    base = load_config("escape_room_ppo")
    (tmp_path / "mine.yaml").write_text("base: escape_room_ppo\nenv: {names: fresh}\nalgo: {lr: 1.0e-4}\n")
    mine = load_config(tmp_path / "mine.yaml")
    assert mine.env.names == "fresh" and mine.env.hints is True and mine.env.agents == 3  # merged, not replaced
    assert mine.algo.lr == 1e-4 and mine.algo.clip_eps == base.algo.clip_eps
    assert mine.train == base.train and mine.model == base.model
    # a base given as a path is read beside the file; a chain of bases merges in order
    (tmp_path / "two.yaml").write_text("base: mine.yaml\nalgo: {epochs: 1}\n")
    two = load_config(tmp_path / "two.yaml", ["algo.lr=2e-4"])
    assert (two.env.names, two.algo.epochs, two.algo.lr) == ("fresh", 1, 2e-4)
    # lists replace; an env naming another world starts afresh
    (tmp_path / "list.yaml").write_text("base: overcooked\nenv: {layout: [cramped_room]}\n")
    assert load_config(tmp_path / "list.yaml").env.layout == ["cramped_room"]
    (tmp_path / "other.yaml").write_text("base: escape_room_ppo\nenv: {name: software-team, engineers: 3}\n")
    assert load_config(tmp_path / "other.yaml").env.options() == {"engineers": 3}
    # a variant runs in a directory of its own, not its base's
    assert mine.run_dir == "runs/mine" and two.run_dir == "runs/two" and base.run_dir == "runs/escape_room_ppo"


def test_a_base_path_is_read_beside_the_file_and_a_bare_name_is_shipped(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.yaml").write_text("base: escape_room_ppo\nalgo: {lr: 1.0e-4}\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "y.yaml").write_text("base: sub/x.yaml\n")
    monkeypatch.chdir(tmp_path)  # ./sub/x.yaml exists here, but not beside conf/y.yaml
    with pytest.raises(TeamTRError, match=r"base 'sub/x.yaml' is not a file beside it"):
        load_config("conf/y.yaml")
    (tmp_path / "overcooked").write_text("seed: 7\n")  # a file in the working directory named like a shipped config
    (tmp_path / "z.yaml").write_text("base: overcooked\n")
    assert load_config("z.yaml").env.name == "overcooked"  # the shipped one, not ./overcooked


def test_shipped_configs_built_on_a_base_say_only_what_differs():
    lolo, full = load_config("overcooked_lolo"), load_config("overcooked")
    assert "forced_coordination" not in lolo.env.layout and len(lolo.env.layout) == 4
    assert lolo.train.final_suite == "generalisation" and lolo.algo == full.algo and lolo.bc == full.bc
    flat, hier = load_config("software_team_flat4"), load_config("software_team_hier")
    assert not flat.team.hierarchy.enabled and hier.team.hierarchy.enabled
    assert flat.model_dump(exclude={"team", "run_dir"}) == hier.model_dump(exclude={"team", "run_dir"})
    fresh = load_config("escape_room_ppo_fresh")
    assert (fresh.env.names, fresh.train.eval_env) == ("fresh", {"names": "heldout"})


@pytest.mark.parametrize("text, words", [
    ("base: [default]\n", "must name one config"),
    ("base: nowhere_at_all\n", "loop.yaml: base 'nowhere_at_all' is not a shipped config"),
    ("base: missing.yaml\n", "loop.yaml: base 'missing.yaml' is not a file beside it"),
    ("base: loop.yaml\n", "comes back to itself"),
])
def test_a_bad_base_is_named(tmp_path, text, words):
    (tmp_path / "loop.yaml").write_text(text)
    with pytest.raises(TeamTRError, match=words):
        load_config(tmp_path / "loop.yaml")
