"""The trust-region toy on one seed: at a too-high LR, PG oscillates and PPO and TRPO do not."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "trust_region_toy.py"


@pytest.fixture(scope="module")
def toy():
    spec = importlib.util.spec_from_file_location("trust_region_toy", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_pg_collapses_while_ppo_and_trpo_hold(toy, tmp_path: Path) -> None:
    out = tmp_path / "toy.json"
    table = toy.main(["--seeds", "1", "--updates", "30", "--out", str(out)])  # lr 1.0, seed 0
    pg, ppo, trpo = table["pg"], table["ppo"], table["trpo"]
    # PG loses a large part of what it had learned at least once; the trust regions much less.
    assert pg["worst_drop"] > 0.3
    assert ppo["worst_drop"] < pg["worst_drop"] / 3 and trpo["worst_drop"] < 0.02
    assert ppo["final_return"] > 0.8 and trpo["final_return"] > 0.6  # both still learn (from 0.05)
    # TRPO's hard bound holds on every update; PG's steps are far larger than PPO's.
    assert trpo["kl_max"] <= 0.01 * (1 + 1e-3)
    assert pg["kl_per_update"] > 3 * ppo["kl_per_update"] > 3 * trpo["kl_per_update"]
    saved = json.loads(out.read_text())
    assert saved["table"]["trpo"]["kl_max"] == trpo["kl_max"]
    assert len(saved["curves"]["pg"][0]["return"]) == 31
