"""Baselines on the real benchmark worlds: Overcooked-AI soups and MPE simple_spread coverage.

Every episode runs through ``Team`` (scripted role agents, the world's own planners) under three
coordinators: ``none`` (always the no-op: each chef / agent follows its own greedy rule),
``random`` (a uniformly random candidate at each decision) and ``heuristic`` (the world's
``expert_directive``).

    python benchmarks/real_worlds.py [--seeds 100] [--out results/real_worlds.json]

Prints two Markdown tables (soups per 400-tick episode per layout; landmarks covered at the end,
collisions, for N=3 and N=4), with mean ± standard deviation over the seeds, and writes the JSON.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import machine_line, write_json  # noqa: E402

from teamtr.core import TeamTRError, World  # noqa: E402
from teamtr.envs import make  # noqa: E402
from teamtr.envs.overcooked import LAYOUTS  # noqa: E402
from teamtr.team import Team  # noqa: E402

COORDINATORS = ("none", "random", "heuristic")


def episode(world: World, coordinator: str, seed: int) -> tuple[World, int]:
    """Play one episode through a Team; return the world at its end and the decisions made."""
    team = Team(world)
    state = team.reset(seed)
    rng = random.Random(10_007 + seed)  # the random coordinator's own draws, fixed by the seed
    done, decisions = False, 0
    while not done:
        if coordinator == "none":
            choice = len(state.candidates) - 1  # the no-op is always last
        elif coordinator == "random":
            choice = rng.randrange(len(state.candidates))
        else:
            choice = state.expert
        state, _, done, _ = team.step(choice)
        decisions += 1
    return world, decisions


def summary(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values)}


def run(name: str, options: dict[str, Any], seeds: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """Per coordinator: mean/std of each metric over ``seeds`` episodes and seconds per episode."""
    out: dict[str, Any] = {}
    world = make(name, **options)
    for coordinator in COORDINATORS:
        values: dict[str, list[float]] = {m: [] for m in metrics}
        start = time.perf_counter()
        for seed in range(seeds):
            end, _ = episode(world, coordinator, seed)
            for m, fn in metrics.items():
                values[m].append(float(fn(end)))
        row = {m: summary(v) for m, v in values.items()}
        row["s_per_episode"] = (time.perf_counter() - start) / seeds
        out[coordinator] = row
    return out


def fmt(cell: dict[str, float]) -> str:
    return f"{cell['mean']:.2f} ± {cell['std']:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--out", default="results/real_worlds.json")
    args = parser.parse_args()
    results: dict[str, Any] = {"seeds": args.seeds, "overcooked": {}, "spread": {}}
    try:
        for layout in LAYOUTS:
            results["overcooked"][layout] = run(
                "overcooked", {"layout": layout}, args.seeds, {"soups": lambda w: w.soups})
        for n in (3, 4):
            results["spread"][f"N={n}"] = run(
                "spread", {"N": n}, args.seeds,
                {"covered": lambda w: len(w.covered()), "collisions": lambda w: w.collisions})
    except TeamTRError as err:  # a missing extra: say which pip install, not a traceback
        raise SystemExit(str(err)) from None
    print(f"Soups per 400-tick Overcooked episode (mean ± std, {args.seeds} seeds)\n")
    print("| layout | no coordinator | random | heuristic |\n|---|---|---|---|")
    for layout, row in results["overcooked"].items():
        print(f"| {layout} | " + " | ".join(fmt(row[c]["soups"]) for c in COORDINATORS) + " |")
    print(f"\nMPE simple_spread: landmarks covered at the end / collisions (mean ± std, {args.seeds} seeds)\n")
    print("| N | no coordinator | random | heuristic |\n|---|---|---|---|")
    for n, row in results["spread"].items():
        print(f"| {n} | " + " | ".join(f"{fmt(row[c]['covered'])} / {fmt(row[c]['collisions'])}"
                                       for c in COORDINATORS) + " |")
    secs = {k: v["heuristic"]["s_per_episode"] for k, v in results["overcooked"].items()}
    print(f"\nseconds per heuristic episode: overcooked max {max(secs.values()):.3f}, "
          f"spread N=4 {results['spread']['N=4']['heuristic']['s_per_episode']:.4f}")
    print(machine_line())
    print(f"wrote {write_json(args.out, results).resolve()}")


if __name__ == "__main__":
    main()
