"""Decisions that continue different static prefixes: one padded pass vs one pass per prefix.

With ``names: fresh`` every escape-room episode has its own task text (its agents and items), so the
16 decisions of a rollout tick continue 16 different static prefixes. ``Coordinator.act`` and
``Coordinator.evaluate`` score them in ONE packed pass (the distinct prefixes encoded together,
right-padded, each memoised on its own; every row attends to its own prefix). Before, they ran one
pass per prefix, and the scorer's one-entry prefix memo re-encoded every prefix on every tick.

Rows, on the same 16 real escape-room decisions (oracle-played, ``names: fresh``, one per episode):

  act, one pass          ``act`` on all 16, prefixes memoised (a rollout tick after an episode's first)
  act, per prefix        ``act`` on each decision alone, the memo cleared before each (the old path)
  update, one pass       ``evaluate`` + backward on all 16, LoRA on every layer (PPO's minibatch pass)
  update, per prefix     ``evaluate`` + backward per decision (the old path)
  act / update, shared   the same 16 states with the default names (one prefix): the reference
  act / update, generic  the fresh-names states with ``task_text: generic`` (the task names nobody: one
                         prefix for all 16, the state lists the names): what fresh names cost then

    python benchmarks/prefixes.py [--repeats 3] [--out results/prefixes.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import backbone, machine_line, median, table, timed, write_json  # noqa: E402

from teamtr.envs import make  # noqa: E402
from teamtr.policy.coordinator import Coordinator  # noqa: E402
from teamtr.policy.prompts import Decision  # noqa: E402
from teamtr.team import Team  # noqa: E402


def decisions(names: str, n: int, tick: int = 2, task_text: str = "full") -> list[Decision]:
    """The state at ``tick`` of ``n`` oracle-played episodes (seeds 0..n-1), one decision each."""
    out = []
    for seed in range(n):
        team = Team(make("escape-room", names=names, task_text=task_text))
        state = team.reset(seed)
        for _ in range(tick):
            state, _, _, _ = team.step(state.expert)
        out.append(Decision(state.task, state.state, tuple(state.history), tuple(c.text for c in state.candidates)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--decisions", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    bb = backbone("smollm2-135m-instruct", args.device, args.random_weights)
    coord = Coordinator(bb, train_layers="all")
    fresh, shared = decisions("fresh", args.decisions), decisions("default", args.decisions)
    generic = decisions("fresh", args.decisions, task_text="generic")
    distinct = len({d.task for d in fresh})

    def act(ds: list[Decision], per_prefix: bool) -> None:
        if not per_prefix:
            coord.act(ds)
            return
        for d in ds:
            coord.scorer.invalidate()
            coord.act([d])

    def update(handles: list[int], per_prefix: bool) -> None:
        groups = [[h] for h in handles] if per_prefix else [handles]
        loss = sum(coord.evaluate(g)[0].logsumexp(-1).sum() for g in groups)
        loss.backward()  # type: ignore[union-attr]
        coord.peft.zero_grad(set_to_none=True)

    kept = {"fresh": coord.act(fresh, keep=True).handles, "shared": coord.act(shared, keep=True).handles,
            "generic": coord.act(generic, keep=True).handles}
    states = {"fresh": fresh, "shared": shared, "generic": generic}
    cases = {"act, one pass": lambda: act(fresh, False), "act, per prefix": lambda: act(fresh, True),
             "update, one pass": lambda: update(kept["fresh"], False),
             "update, per prefix": lambda: update(kept["fresh"], True),
             "act, shared prefix (default names)": lambda: act(shared, False),
             "update, shared prefix (default names)": lambda: update(kept["shared"], False),
             "act, fresh names, generic task text": lambda: act(generic, False),
             "update, fresh names, generic task text": lambda: update(kept["generic"], False)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.repeats):  # interleaved, so load from other processes hits every row alike
        for name, fn in cases.items():
            if name.startswith("act"):  # memo warm for this row's states
                coord.act(states["shared" if "default" in name else "generic" if "generic" in name else "fresh"])
            times[name].append(timed(fn, bb.device)[0])
    rows = {k: {"median_s": median(v), "best_s": min(v), "decisions_per_s": args.decisions / median(v)}
            for k, v in times.items()}
    ratios = {"act": rows["act, per prefix"]["median_s"] / rows["act, one pass"]["median_s"],
              "update": rows["update, per prefix"]["median_s"] / rows["update, one pass"]["median_s"],
              "act, fresh full / generic": rows["act, one pass"]["median_s"]
              / rows["act, fresh names, generic task text"]["median_s"],
              "update, fresh full / generic": rows["update, one pass"]["median_s"]
              / rows["update, fresh names, generic task text"]["median_s"]}
    print(machine_line())
    print(f"{args.decisions} escape-room decisions, {distinct} distinct static prefixes (names: fresh), "
          f"{bb.name} {str(bb.dtype).replace('torch.', '')} ({bb.source}), LoRA r8 on every layer; "
          f"median of {args.repeats}")
    print(table(["case", "median s", "best s", "decisions/s"],
                [[k, r["median_s"], r["best_s"], r["decisions_per_s"]] for k, r in rows.items()]))
    print(f"per prefix / one pass: act {ratios['act']:.2f}x, update {ratios['update']:.2f}x; fresh names, "
          f"full / generic task text: act {ratios['act, fresh full / generic']:.2f}x, "
          f"update {ratios['update, fresh full / generic']:.2f}x")
    if args.out:
        write_json(args.out, {"command": " ".join(["python", "benchmarks/prefixes.py", *sys.argv[1:]]),
                              "decisions": args.decisions, "distinct_prefixes": distinct,
                              "repeats": args.repeats, "model": bb.name, "dtype": str(bb.dtype),
                              "rows": rows, "ratios": ratios})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
