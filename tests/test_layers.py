"""The house rules of ARCHITECTURE.md, checked on the source: no import runs up a floor, the ground
floors never import torch, and no function grows past one screen."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "teamtr"

#: package part -> the parts of teamtr it may import (itself always allowed). Parts are top-level
#: modules or sub-packages; a few modules of a sub-package are named on their own where their floor
#: differs from the package's (the torch-free settings, the event-derived metrics).
FLOORS: dict[str, set[str]] = {
    "core": set(),
    "atomic": {"core"},
    "agents": {"core"},
    "rewards": {"core"},
    "envs": {"core", "atomic"},
    "team": {"core", "agents", "rewards"},
    "hierarchy": {"core", "team"},  # when a hierarchical coordinator's strategic level decides (no torch)
    "gym": {"core", "envs", "team", "agents", "rewards"},
    "play": {"core", "team"},
    "pettingzoo": {"core", "envs", "team", "agents", "rewards", "gym"},
    "rl": {"core"},
    "rl.settings": {"core"},
    "policy.settings": {"core"},
    "policy": {"core", "atomic", "rl", "telemetry.progress", "telemetry.metrics"},  # the card: metric cells
    "telemetry.metrics": {"core"},
    "telemetry.progress": set(),  # a terminal utility every floor that does long work may use
    "config": {"core", "policy.settings", "rl.settings", "rl", "rewards"},
    "telemetry": {"core", "atomic", "config", "rl", "rl.settings", "telemetry.metrics"},
    "eval": {"core", "atomic", "envs", "team", "hierarchy", "agents", "rewards", "policy", "policy.settings", "rl",
             "telemetry", "telemetry.metrics", "config"},
    "train": {"core", "atomic", "envs", "team", "hierarchy", "agents", "rewards", "policy", "policy.settings", "rl",
              "rl.settings", "telemetry", "telemetry.metrics", "config", "eval"},
}
TOP = {"cli", "serve", "export", "__init__"}  # the top floor may import anything

#: Modules that must import without torch (the worlds, the text game, the config).
TORCH_FREE = ["teamtr.core", "teamtr.envs", "teamtr.envs.escape_room", "teamtr.envs.software_team",
              "teamtr.envs.registry", "teamtr.agents.scripted", "teamtr.rewards.terms", "teamtr.team", "teamtr.hierarchy",
              "teamtr.config", "teamtr.policy.settings", "teamtr.rl.settings", "teamtr.telemetry.metrics",
              "teamtr.cli"]


def part_of(module: str) -> str:
    """``teamtr.policy.settings`` -> ``policy.settings`` when that has its own floor, else ``policy``."""
    rest = module.removeprefix("teamtr.").removeprefix("teamtr")
    parts = rest.split(".")
    two = ".".join(parts[:2])
    return two if two in FLOORS else parts[0]


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``teamtr`` import in a file, at any depth (lazy imports count too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [(node.lineno, n) for n in names if n.startswith("teamtr")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("teamtr")]
    return found


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__") if rel.name == "__init__" else ".".join(rel.parts)


def test_no_import_runs_up_a_floor():
    wrong = []
    for path in sources():
        here = part_of(module_name(path))
        if here in TOP or here == "":
            continue
        allowed = FLOORS[here] | {here}
        for line, target in imports(path):
            there = part_of(target)
            top = there.split(".")[0]
            if there in allowed or top in allowed or there in ("", "__version__") or top == here.split(".")[0]:
                continue  # a floor below (a package allowed allows its modules), or within one package
            wrong.append(f"{path.relative_to(SRC)}:{line} ({here}) imports {target} ({there})")
    assert not wrong, "imports that run up a floor:\n" + "\n".join(wrong)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_ground_floors_import_without_torch(module):
    code = f"import sys, {module}; sys.exit(3 if 'torch' in sys.modules else 0)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"importing {module} imported torch" + done.stderr[-2000:]


def test_config_validation_runs_without_torch():
    """``teamtr play`` and ``teamtr config show`` validate a whole config, algo keys included."""
    code = ("import sys; from teamtr.config import load_config; load_config('default', ['algo.lr=1e-4']); "
            "sys.exit(3 if 'torch' in sys.modules else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_no_function_over_60_lines():
    long = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)
