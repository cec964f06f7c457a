"""The README's result tables are generated from results/*.json (benchmarks/tables.py), not typed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_readme_tables_match_results() -> None:
    done = subprocess.run([sys.executable, "benchmarks/tables.py", "--check", "README.md"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (ROOT / "README.md").read_text().count("<!-- results: ") >= 1


def test_a_stale_table_is_caught(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    stale = text.replace("| 1.000 | 0.034 |", "| 1.000 | 0.035 |", 1)
    assert stale != text
    (tmp_path / "README.md").write_text(stale)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/tables.py"), "--check", str(tmp_path / "README.md")],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "stale" in done.stdout


def _tables():
    spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks/tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sweep_file(path: Path, command: str, env: dict, bc: bool, iterations: int, rows: dict, init: str | None = None,
                directives: str = "single", **train) -> str:
    stat = lambda v: {"mean": v, "std": 0.0, "values": [v]}  # noqa: E731
    config = {"env": env, "bc": {"enabled": bc}, "algo": {"name": "ppo"}, "team": {"directives": directives},
              "model": {"init": init},
              "train": {"iterations": iterations, "eval_seed_offset": 1_000_000, **train}}
    path.write_text(json.dumps({"command": command, "config": config, "seeds": [0],
                                "rows": {p: {"success": stat(v)} for p, v in rows.items()}}))
    return str(path)


def test_world_table_labels_each_row_by_its_recipe_and_world(tmp_path: Path) -> None:
    tables = _tables()
    a = _sweep_file(tmp_path / "a.json", "teamtr sweep default --seeds 0", {"name": "escape-room", "agents": 3},
                    True, 2, {"trained": 1.0, "bc": 0.9, "zero-shot": 0.0, "random": 0.03})
    b = _sweep_file(tmp_path / "b.json", "teamtr sweep escape_room_ppo --seeds 0",
                    {"name": "escape-room", "agents": 3, "hints": True}, False, 30,
                    {"trained": 0.8, "zero-shot": 0.5}, eval_env={"names": "heldout"})
    c = _sweep_file(tmp_path / "c.json", "teamtr sweep default --seeds 0 --set model.init=runs/x/bc",
                    {"name": "escape-room", "agents": 3}, False, 2, {"trained": 0.7, "bc": 0.6}, init="runs/x/bc",
                    directives="whole_team")
    text = tables.world([a, b, c])
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "1.000 |" in lines["BC + PPO"] and "0.900 |" in lines["BC"]
    assert "0.800 |" in lines["PPO alone (trained with hints=True; tested with names=heldout)"]
    assert "0.700 |" in lines["PPO from `runs/x/bc`, whole-team directives"]
    assert "0.600 |" in lines["`runs/x/bc` (the warm start), whole-team directives"]
    # a baseline is taken from the first file whose world is the table's: b's zero-shot (0.5) is another world's
    assert "0.000 |" in lines["zero-shot"] and "0.030 |" in lines["random"]
    # the oracle directs in its run's mode: a whole-team file adds its own oracle row, not its random one
    w = _sweep_file(tmp_path / "w.json", "teamtr sweep default --seeds 0 --set team.directives=whole_team",
                    {"name": "escape-room", "agents": 3}, True, 1, {"trained": 0.5, "oracle": 0.99, "random": 0.02},
                    directives="whole_team")
    a2 = _sweep_file(tmp_path / "a2.json", "teamtr sweep default --seeds 0", {"name": "escape-room", "agents": 3},
                     True, 2, {"trained": 1.0, "oracle": 1.0, "random": 0.03})
    lines = {line.split(" | ")[0].lstrip("| "): line for line in tables.world([a2, w]).splitlines()
             if line.startswith("| ")}
    assert "1.000 |" in lines["oracle"] and "0.990 |" in lines["oracle, whole-team directives"]
    assert "0.030 |" in lines["random"] and not any("0.020" in line for line in lines.values())
    # a hierarchical run says so in its label
    h = json.loads(Path(a2).read_text())
    h["config"]["team"]["hierarchy"] = {"enabled": True}
    Path(a2).write_text(json.dumps(h))
    flat = _sweep_file(tmp_path / "f.json", "teamtr sweep x --seeds 0", {"name": "escape-room", "agents": 3},
                       True, 2, {"trained": 0.9, "oracle": 1.0, "zero-shot": 0.1})
    text = tables.world([flat, a2])
    assert "| BC + PPO, hierarchical | 1.000 |" in text
    # the oracle never uses the hierarchy: one oracle row
    assert [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| oracle")] == ["| oracle"]
    # DAgger rounds after the clone are named in both rows
    d = json.loads(Path(flat).read_text())
    d["config"]["bc"]["dagger_rounds"] = 1
    Path(flat).write_text(json.dumps(d))
    text = tables.world([flat])
    assert "| BC + DAgger (1 round) + PPO | 0.900 |" in text
    assert tables._warm(d["config"]) == "BC + DAgger (1 round)"
    # a sweep with the generalisation suite: its held-out-seeds rows, not its other suites'
    g = _sweep_file(tmp_path / "g.json", "teamtr sweep escape_room_ppo_fresh --seeds 0", {"name": "escape-room", "agents": 3},
                    False, 30, {"trained @ heldout": 0.8, "trained @ agents=4": 0.4, "oracle @ heldout": 1.0,
                                "oracle @ agents=4": 0.97})
    text = tables.world([flat, g])
    assert "| PPO alone | 0.800 |" in text and "0.400" not in text and "0.970" not in text
    other = _sweep_file(tmp_path / "d.json", "teamtr sweep software_team --seeds 0",
                        {"name": "software-team"}, True, 2, {"trained": 1.0})
    with pytest.raises(SystemExit, match="one world's files per table"):
        tables.world([a, other])


def _layouts_file(path: Path, command: str, bc: bool, rows: dict, seeds=(0,)) -> str:
    stat = lambda v: {"mean": sum(v) / len(v), "std": 0.5, "values": list(v)}  # noqa: E731
    config = {"env": {"name": "overcooked", "layout": ["a", "b"], "horizon": 200}, "bc": {"enabled": bc},
              "algo": {"name": "ppo"}, "team": {}, "model": {},
              "train": {"iterations": 2, "eval_seed_offset": 1_000_000, "eval_env": {"horizon": 400}}}
    path.write_text(json.dumps({"command": command, "config": config, "seeds": list(seeds),
                                "rows": {p: {"soups": stat(v[0]), "soups_std": stat(v[1]),
                                             **({"episodes": stat([100.0])} if p.startswith("heuristic") else {})}
                                         for p, v in rows.items()}}))
    return str(path)


def test_layouts_table_puts_a_row_per_layout_and_a_column_per_policy(tmp_path: Path) -> None:
    tables = _tables()
    a = _layouts_file(tmp_path / "a.json", "teamtr sweep overcooked --seeds 0", True, {
        "trained @ layout=a": ([9.0], [1.0]), "trained @ layout=b": ([12.0], [0.0]),
        "bc @ layout=a": ([8.0], [2.0]), "heuristic @ layout=a": ([8.5], [0.9]), "heuristic @ layout=b": ([12.0], [0.0])})
    b = _layouts_file(tmp_path / "b.json", "teamtr sweep overcooked_lolo --seeds 0 1", False, {
        "trained @ layout=a": ([7.0, 9.0], [1.0, 1.0]), "trained @ layout=c unseen": ([3.0, 5.0], [1.0, 1.0]),
        "heuristic @ layout=a": ([1.0, 1.0], [0.0, 0.0])}, seeds=(0, 1))
    text = tables.layouts([a, b])
    assert "| layout | BC + PPO (1) | BC (1) | heuristic (100 ep.) | PPO alone (2) |" in text
    # one seed: the spread over its episodes; two seeds: the mean ± std over the seeds' means
    assert "| a | 9.00 ± 1.00 | 8.00 ± 2.00 | 8.50 ± 0.90 | 8.00 ± 0.50 |" in text
    assert "| b | 12.00 ± 0.00 | - | 12.00 ± 0.00 | - |" in text
    assert "| c unseen | - | - | - | 4.00 ± 0.50 |" in text  # the later file's baselines are not shown
    assert "tested with `horizon=400`" in text
    flat = _sweep_file(tmp_path / "c.json", "teamtr sweep default --seeds 0", {"name": "escape-room"}, True, 2,
                       {"trained": 1.0})
    with pytest.raises(SystemExit, match="names no layout"):
        tables.layouts([flat])


def test_a_file_outside_the_repository_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """A path outside the repository used to end in a ValueError traceback from ``relative_to``."""
    tables = _tables()
    outside = tmp_path / "sweep.json"
    outside.write_text("{}")
    with pytest.raises(SystemExit, match="outside the repository.*copy it under results/"):
        tables.expand(str(outside))
    with pytest.raises(SystemExit, match="outside the repository"):
        tables.expand("../outside.json")
    assert tables.expand("results/escape_room/sweep_ppo.json") == ["results/escape_room/sweep_ppo.json"]


def test_sweep_table_says_the_world_its_rows_were_tested_in(tmp_path: Path) -> None:
    """A run trained on fresh names and tested on held-out ones: the header names both worlds."""
    tables = _tables()
    fresh = _sweep_file(tmp_path / "fresh.json", "teamtr sweep x --seeds 0", {"name": "software-team", "names": "fresh"},
                        True, 0, {"trained @ heldout": 1.0}, eval_env={"names": "heldout"})
    plain = _sweep_file(tmp_path / "plain.json", "teamtr sweep y --seeds 0", {"name": "software-team"}, True, 0,
                        {"trained": 0.5})
    text = tables.sweep([fresh, plain])
    assert "software-team (`names=fresh`; tested with `names=heldout`), seeds 0," in text
    assert "software-team (defaults), seeds 0," in text and text.count("tested with") == 1
