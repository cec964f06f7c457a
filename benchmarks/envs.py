"""World speed: coordinator decisions per second on one core, scripted agents and the oracle.

For every registered world whose module imports (extras included once installed), runs oracle
episodes with scripted role agents through ``Team`` (state text, candidates and the expert built at
every decision, as in training) and reports decisions/s, ticks/s and seconds per episode.

    python benchmarks/envs.py [--seconds 3] [--out results/envs.json]

Prints a table and the path of the JSON it writes (``results/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import machine_line, write_json  # noqa: E402

from teamtr.core import TeamTRError  # noqa: E402
from teamtr.envs import make, names  # noqa: E402
from teamtr.team import Team  # noqa: E402


def bench(world: str, seconds: float) -> dict[str, float]:
    """Run oracle episodes of ``world`` for about ``seconds``; return the rates."""
    team = Team(make(world))
    decisions = ticks = episodes = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        state = team.reset(episodes)
        done = False
        while not done:
            state, _, done, info = team.step(state.expert)
            decisions += 1
            ticks += info["ticks"]
        episodes += 1
    elapsed = time.perf_counter() - start
    return {
        "decisions_per_s": decisions / elapsed,
        "ticks_per_s": ticks / elapsed,
        "s_per_episode": elapsed / episodes,
        "decisions_per_episode": decisions / episodes,
        "episodes": episodes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per world")
    parser.add_argument("--out", default="results/envs.json")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):  # one core, as the claim says
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    results: dict[str, dict[str, float] | str] = {}
    for world in names():
        try:
            results[world] = bench(world, args.seconds)
        except TeamTRError as err:  # a missing extra: say so in the table, keep going
            results[world] = f"skipped: {err}"
    print(f"{'world':<15}{'decisions/s':>12}{'ticks/s':>10}{'s/episode':>11}{'decisions/ep':>14}")
    for world, row in results.items():
        if isinstance(row, str):
            print(f"{world:<15}{row}")
            continue
        print(f"{world:<15}{row['decisions_per_s']:>12.0f}{row['ticks_per_s']:>10.0f}"
              f"{row['s_per_episode']:>11.5f}{row['decisions_per_episode']:>14.1f}")
    print(machine_line())
    print(f"wrote {write_json(args.out, {'seconds': args.seconds, 'worlds': results}).resolve()}")


if __name__ == "__main__":
    main()
