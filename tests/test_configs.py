"""The shipped configs: each loads by name from any directory, validates, and builds its world."""

import pytest

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
