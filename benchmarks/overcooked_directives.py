"""What an Overcooked coordinator's directives change: the share of its decisions that say nothing new.

Each decision is sorted by what its directive asks of the chef, read from the compact state text the
coordinator saw (the chef's line ends in ``own: TASK`` when it follows its own greedy rule, else in the
sub-task in force):

- ``noop``: "no new directive";
- ``own rule``: the sub-task the chef's own rule is on already (it changes little: the chef then keeps
  to that sub-task until it is done instead of choosing again at every tick);
- ``in force``: the sub-task already directed, said again;
- ``new``: anything else, the directives that change what a chef does.

Sources: the heuristic coordinator, played here on the held-out seeds of the trained configs' world
(400 ticks, ``decision_every`` 25, compact state text), and the end-of-run tables of finished runs
(``RUN/eval_transcripts.jsonl``, one row per policy and layout).

    python benchmarks/overcooked_directives.py [--episodes 5] [--run RUN ...] [--out FILE]

Prints a Markdown table and writes the JSON (default ``results/overcooked/directive_kinds.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).parent))

from _common import machine, machine_line, write_json  # noqa: E402

from teamtr.core import NOOP, TeamTRError  # noqa: E402
from teamtr.envs.overcooked import LAYOUTS, OvercookedWorld  # noqa: E402
from teamtr.envs.overcooked_chef import TASKS  # noqa: E402
from teamtr.team import Team  # noqa: E402

KINDS = ("noop", "own rule", "in force", "new")
HELD_OUT = 1_000_000  # train.eval_seed_offset's default: the tables' held-out seeds
_TASK_OF = {text: task for task, text in TASKS.items()}


def kind(state: str, directive: str) -> str:
    """The kind of ``directive`` (a candidate's text) given the compact ``state`` text it answered."""
    if directive == NOOP.text:
        return "noop"
    chef, _, task = directive.partition(": ")
    if task not in _TASK_OF:
        raise TeamTRError(f"{directive!r} is not an Overcooked directive (\"chef_N: sub-task\").")
    line = next((part for part in state.split("; ") if part.startswith(f"{chef} by ")), None)
    if line is None:
        raise TeamTRError(f"the state has no line for {chef}: {state!r}; these are compact state texts only "
                          "(env.state_text=compact).")
    doing = line.split(". ")[0].split(", ")[-1]  # the chef's last field (the last chef's line goes on: pots)
    if doing == f"own: {task}":
        return "own rule"
    return "in force" if doing.removeprefix("cannot: ") == task else "new"


def shares(pairs: Iterable[tuple[str, str]]) -> dict[str, float]:
    counts = Counter(kind(state, directive) for state, directive in pairs)
    total = sum(counts.values())
    return {"decisions": float(total), **{k: counts[k] / total if total else 0.0 for k in KINDS}}


def heuristic_rows(episodes: int) -> dict[str, dict[str, float]]:
    rows = {}
    for layout in LAYOUTS:
        pairs: list[tuple[str, str]] = []
        for seed in range(HELD_OUT, HELD_OUT + episodes):
            world = OvercookedWorld(layout=layout, horizon=400, decision_every=25, state_text="compact")
            team = Team(world, history_len=0)
            state, done = team.reset(seed), False
            while not done:
                pairs.append((state.state, state.candidates[state.expert].text))
                state, _, done, _ = team.step(state.expert)
        rows[f"heuristic @ layout={layout}"] = {**shares(pairs), "episodes": float(episodes)}
    return rows


def run_rows(run: Path) -> dict[str, dict[str, float]]:
    path = run / "eval_transcripts.jsonl"
    if not path.is_file():
        raise TeamTRError(f"{path} is missing: give a finished run's directory (its end-of-run table writes it).")
    by_policy: dict[str, list[tuple[str, str]]] = {}
    episodes: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        episode = json.loads(line)
        name = f"{run}: {episode['policy']}"
        if not any(step.get("directive") for step in episode["steps"]):
            continue  # scripted rows without recorded directives
        episodes[name] += 1
        by_policy.setdefault(name, []).extend((s["state"], s["directive"]) for s in episode["steps"])
    return {name: {**shares(pairs), "episodes": float(episodes[name])} for name, pairs in by_policy.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=5, help="heuristic episodes per layout")
    parser.add_argument("--run", nargs="*", default=[], help="finished runs whose end-of-run tables to read")
    parser.add_argument("--out", default="results/overcooked/directive_kinds.json")
    args = parser.parse_args(argv)
    rows = heuristic_rows(args.episodes)
    for run in args.run:
        rows.update(run_rows(Path(run)))
    print("| policy | decisions an episode | " + " | ".join(KINDS) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for name, row in rows.items():
        cells = " | ".join(f"{row[k]:.3f}" for k in KINDS)
        print(f"| {name} | {row['decisions'] / row['episodes']:.0f} | {cells} |")
    print(machine_line())
    write_json(args.out, {"machine": machine(), "world": {"horizon": 400, "decision_every": 25, "state_text": "compact",
                                    "seeds_from": HELD_OUT}, "runs": args.run, "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
