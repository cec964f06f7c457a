"""AlgoConfig: each knob's range declared once, enforced with messages for people; teamtr.rl is lazy."""

from __future__ import annotations

import importlib
import math
import subprocess
import sys
from dataclasses import fields

import pytest

import teamtr.rl
from teamtr.rl import AlgoConfig, RLInputError

DESCRIBED = AlgoConfig.describe()
FLOATS = [name for name, d in DESCRIBED.items() if d["type"] == "float"]
INTS = [name for name, d in DESCRIBED.items() if d["type"] == "int"]


def test_describe_lists_every_field_with_a_valid_default_and_its_range() -> None:
    assert list(DESCRIBED) == [f.name for f in fields(AlgoConfig)]
    assert DESCRIBED["clip_eps"]["range"] == (0.0, 1.0, False, False)
    assert DESCRIBED["clip_eps"]["allowed"] == "0 < clip_eps < 1"
    assert DESCRIBED["epochs"]["allowed"] == "1 <= epochs"
    assert DESCRIBED["value_clip"]["optional"] and DESCRIBED["value_clip"]["allowed"] == "0 < value_clip, or None"
    assert DESCRIBED["kl_control"]["choices"] == ("fixed", "adaptive")
    assert all(d["help"] for d in DESCRIBED.values())
    defaults = {name: d["default"] for name, d in DESCRIBED.items()}
    assert AlgoConfig.from_dict(defaults) == AlgoConfig()


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_every_float_refuses_non_finite_values(name: str, bad: float) -> None:
    with pytest.raises(RLInputError, match=rf"^{name} = -?(nan|inf) is not a finite number; allowed: "):
        AlgoConfig.from_dict({name: bad})


@pytest.mark.parametrize("name", INTS)
def test_every_int_refuses_fractions_and_booleans_and_takes_whole_floats(name: str) -> None:
    for bad in (2.5, True, "3"):
        with pytest.raises(RLInputError, match=f"^{name} = .* is not a whole number"):
            AlgoConfig.from_dict({name: bad})
    value = getattr(AlgoConfig.from_dict({name: 3.0}), name)
    assert value == 3 and type(value) is int


def test_bounds_are_exactly_those_declared() -> None:
    assert AlgoConfig(gamma=0.0).gamma == 0.0 and AlgoConfig(gamma=1).gamma == 1.0  # closed ends
    for bad in ({"clip_eps": 1.0}, {"clip_eps": 0}, {"gamma": 1.0001}, {"epochs": 0},
                {"backtrack_ratio": 1}, {"fisher_batch_size": 0}, {"warmup_updates": -1}):
        with pytest.raises(RLInputError, match="is out of range; allowed: "):
            AlgoConfig.from_dict(bad)
    assert AlgoConfig(value_clip=None, max_grad_norm=None).max_grad_norm is None
    with pytest.raises(RLInputError, match=r"^clip_eps = None is not a finite number"):
        AlgoConfig(clip_eps=None)
    with pytest.raises(RLInputError, match=r"^kl_control = 'pid' is not allowed; choose 'fixed' or 'adaptive'\."):
        AlgoConfig(kl_control="pid")
    with pytest.raises(RLInputError, match=r"^normalize_advantages = 1 is not true or false"):
        AlgoConfig(normalize_advantages=1)
    with pytest.raises(ValueError, match=r"unknown algorithm key\(s\) \['lr_max'\]; known: \['backtrack_iters'"):
        AlgoConfig.from_dict({"lr_max": 1.0})


def test_settings_and_the_package_import_without_torch() -> None:
    code = ("import sys, teamtr.rl.settings; from teamtr.rl import AlgoConfig, RLInputError; "
            "AlgoConfig.describe(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_public_name_resolves_to_its_home_module() -> None:
    for name in teamtr.rl.__all__:
        home = importlib.import_module(f"teamtr.rl.{teamtr.rl._HOMES[name]}")
        assert getattr(teamtr.rl, name) is getattr(home, name)
    with pytest.raises(AttributeError, match="RolloutBuffer"):
        teamtr.rl.RolloutBuffer  # noqa: B018
