"""The ``teamtr`` command line: ``envs``, ``eval``, ``play`` (``train``, ``report``, ``doctor`` later).

    teamtr envs
    teamtr eval --policy oracle --env escape-room --episodes 500 --set env.agents=4
    teamtr play escape-room --set env.names=heldout
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from teamtr.core import TeamTRError
from teamtr.envs import info, make, names, spec
from teamtr.eval.baselines import BASELINES, baseline
from teamtr.eval.evaluate import run_episodes
from teamtr.team import Team
from teamtr.telemetry.metrics import METRICS, summarize


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    """``["env.agents=4", "env.names=heldout"]`` -> ``{"agents": 4, "names": "heldout"}``.

    Values are read as YAML scalars (``4`` is an int, ``0.9`` a float, ``true`` a bool).
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("env.") or len(key) <= 4:
            raise TeamTRError(
                f"--set {pair!r} is not understood; for now use --set env.OPTION=VALUE "
                "(e.g. --set env.agents=4)."
            )
        options[key[4:]] = yaml.safe_load(value)
    return options


def cmd_envs(_: argparse.Namespace) -> int:
    width = max(map(len, names()))
    for name in names():
        print(f"{name:<{width}}  {info(name)}")
    return 0


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """A plain-text table: one row per label, one column per metric."""
    width = max(8, *map(len, rows))
    sizes = {c: max(8, len(c)) for c in METRICS}
    head = f"{'policy':<{width}} " + " ".join(f"{c:>{sizes[c]}}" for c in METRICS)
    lines = [head, "-" * len(head)]
    for label, row in rows.items():
        lines.append(f"{label:<{width}} " + " ".join(f"{row[c]:>{sizes[c]}.3f}" for c in METRICS))
    return "\n".join(lines)


def cmd_eval(args: argparse.Namespace) -> int:
    spec(args.env)  # unknown names fail here, with the list of known ones
    options = parse_sets(args.set)
    make(args.env, **options)  # bad options fail once, before any episode
    seeds = range(args.seed, args.seed + args.episodes)
    rows = {}
    for name in args.policy:
        rows[name] = summarize(run_episodes(args.env, options, baseline(name, args.seed), seeds))
    shown = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    print(f"{args.env} ({shown}), {args.episodes} episodes from seed {args.seed}")
    print(format_table(rows))
    if args.json:
        print(json.dumps(rows))
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    options = parse_sets(args.set)
    team = Team(make(args.env, **options))
    state = team.reset(args.seed)
    print(state.task)
    total = 0.0
    while True:
        print(f"\n{state.state}")
        if state.history:
            print("recent: " + " | ".join(state.history))
        for i, candidate in enumerate(state.candidates):
            print(f"  {i:>2}. {candidate.text}")
        answer = input("your directive (number, q to quit)> ").strip()
        if answer.lower() in ("q", "quit"):
            return 0
        if not answer.isdigit() or int(answer) >= len(state.candidates):
            print(f"type a number from 0 to {len(state.candidates) - 1}, or q")
            continue
        state, reward, done, step_info = team.step(int(answer))
        total += reward
        shown = ", ".join(f"{e.kind}({e.agent or ''})" for e in step_info["events"]) or "none"
        print(f"reward {reward:+.2f} (total {total:+.2f}); events: {shown}")
        if done:
            print(f"\nepisode over: {step_info['outcome']} after {state.tick} ticks, return {total:+.2f}")
            return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teamtr", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("envs", help="list the worlds").set_defaults(run=cmd_envs)
    ev = sub.add_parser("eval", help="evaluate coordinator policies on a world")
    ev.add_argument("--policy", nargs="+", default=["oracle"], choices=sorted(BASELINES))
    ev.add_argument("--env", default="escape-room")
    ev.add_argument("--episodes", type=int, default=500)
    ev.add_argument("--seed", type=int, default=0, help="first seed (seeds seed..seed+episodes-1)")
    ev.add_argument("--set", action="append", default=[], metavar="env.KEY=VALUE")
    ev.add_argument("--json", action="store_true", help="also print the table as JSON")
    ev.set_defaults(run=cmd_eval)
    play = sub.add_parser("play", help="be the coordinator yourself, in the terminal")
    play.add_argument("env", nargs="?", default="escape-room")
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--set", action="append", default=[], metavar="env.KEY=VALUE")
    play.set_defaults(run=cmd_play)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TeamTRError as err:
        print(f"teamtr: error: {err}", file=sys.stderr)
        return 2
    except (EOFError, KeyboardInterrupt):
        return 130


if __name__ == "__main__":
    sys.exit(main())
