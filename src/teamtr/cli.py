"""The ``teamtr`` command line.

    teamtr envs
    teamtr train --config configs/default.yaml [--set algo.clip_eps=0.1] [--resume RUN_DIR]
    teamtr eval --policy oracle random --env escape-room --episodes 500 --set env.agents=4
    teamtr eval --checkpoint runs/default --suite generalisation --episodes 200
    teamtr report RUN_DIR | teamtr doctor RUN_DIR
    teamtr play escape-room --set env.names=heldout
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pathlib import Path

from teamtr.atomic import atomic_write_text
from teamtr.config import Config, load_config
from teamtr.core import TeamTRError
from teamtr.envs import info, make, names, spec
from teamtr.eval import policies as eval_policies
from teamtr.eval.suites import evaluate_table, suites
from teamtr.team import Team
from teamtr.telemetry.metrics import METRICS

DEFAULT_CONFIG = "configs/default.yaml"


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


def _config(path: str | None, sets: Sequence[str], run_dir: Path | None = None) -> Config:
    if path is None and run_dir is not None and (run_dir / "config.yaml").is_file():
        path = str(run_dir / "config.yaml")
    if path is None and Path(DEFAULT_CONFIG).is_file():
        path = DEFAULT_CONFIG
    return load_config(path, list(sets))


def resolve_checkpoint(path: str) -> tuple[Path, Path]:
    """(checkpoint folder holding ``coordinator/`` or ``adapter/``, run directory) for a checkpoint
    folder, a run directory (its latest checkpoint) or a ``Coordinator.save`` folder."""
    p = Path(path)
    if (p / "coordinator").is_dir():
        return p / "coordinator", p.parent.parent
    if (p / "checkpoints").is_dir():
        from teamtr.train.checkpoint import latest_checkpoint

        found = latest_checkpoint(p)
        if found is not None:
            return found / "coordinator", p
    if (p / "adapter").is_dir():
        return p, p.parent
    raise TeamTRError(f"--checkpoint {path}: no checkpoint there (expected RUN_DIR, RUN_DIR/checkpoints/iter_N, "
                      "or a folder with adapter/).")


def build_policies(names_: Sequence[str], config: Config, checkpoint: Path | None, seed: int) -> dict[str, Any]:
    def coordinator() -> Any:
        from teamtr.policy.coordinator import build_coordinator

        built = build_coordinator(config)
        if checkpoint is not None:
            built.load(checkpoint)
        return built

    return eval_policies.build_policies(names_, seed=seed, coordinator=coordinator, trained=checkpoint is not None)


def cmd_eval(args: argparse.Namespace) -> int:
    checkpoint, run_dir = resolve_checkpoint(args.checkpoint) if args.checkpoint else (None, None)
    config = _config(args.config, args.set, run_dir)
    env = args.env or config.env.name
    spec(env)  # unknown names fail here, with the list of known ones
    options = config.env.options() if env == config.env.name else {}
    make(env, **options)  # bad options fail once, before any episode
    policy_names = args.policy or (["trained"] if checkpoint is not None else ["oracle"])
    policies = build_policies(policy_names, config, checkpoint, args.seed)
    seeds = list(range(args.seed, args.seed + args.episodes))
    rows = evaluate_table(env, suites(env, options, args.suite), policies, seeds, rewards=config.rewards.composer(),
                          history_len=config.team.history_len)
    shown = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    print(f"{env} ({shown}), {args.episodes} episodes from seed {args.seed}")
    print(format_table(rows))
    if args.json:
        write_json(Path(args.json), {"env": env, "options": options, "episodes": args.episodes,
                                     "seed": args.seed, "rows": rows})
        print(f"wrote {args.json}")
    return 0


def write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2))


def cmd_train(args: argparse.Namespace) -> int:
    from teamtr.train.trainer import Trainer

    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").is_file():
            raise TeamTRError(f"--resume {run_dir}: not a run directory (no config.yaml).")
        config = load_config(run_dir / "config.yaml", [*args.set, f"run_dir={run_dir}"])
    else:
        config = load_config(args.config, args.set)
        if (Path(config.run_dir) / "metrics.jsonl").exists() and not args.overwrite:
            raise TeamTRError(f"run_dir {config.run_dir} already holds a run: --resume {config.run_dir} to "
                              "continue it, --overwrite to start over, or --set run_dir=runs/NEW.")
        if args.overwrite and Path(config.run_dir).exists():
            import shutil

            shutil.rmtree(config.run_dir)
    print(f"run directory: {config.run_dir}")
    trainer = Trainer(config, resume=bool(args.resume))
    try:
        trainer.run()
        n = config.train.final_eval_episodes
        if n:
            policies = eval_policies.build_policies(("trained", "zero-shot", "random", "oracle"), seed=config.seed,
                                     coordinator=trainer.coordinator)
            off = config.train.eval_seed_offset
            counts = {name: n for name in policies}
            counts["zero-shot"] = min(n, config.train.final_zero_shot_episodes)
            rows = {}
            for name, policy in policies.items():
                if counts[name]:
                    rows.update(evaluate_table(config.env.name, {"heldout": config.env.options()}, {name: policy},
                                               list(range(off, off + counts[name])), rewards=trainer.rewards,
                                               history_len=config.team.history_len))
            shown = ", ".join(f"{k} {v}" for k, v in counts.items())
            print(f"\n{config.env.name}: held-out seeds from {off} ({shown} episodes)")
            print(format_table(rows))
            write_json(Path(config.run_dir) / "final_eval.json", {"episodes": counts, "rows": rows})
    finally:
        trainer.close()
    from teamtr.telemetry.report import write_report

    print(f"report: {write_report(config.run_dir)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from teamtr.telemetry.report import write_report

    print(write_report(args.run_dir))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from teamtr.telemetry.doctor import diagnose, format_findings

    findings = diagnose(args.run_dir)
    print(format_findings(findings))
    return 1 if findings and args.strict else 0


def cmd_play(args: argparse.Namespace) -> int:
    config = load_config(None, args.set)
    env = args.env or config.env.name
    team = Team(make(env, **(config.env.options() if env == config.env.name else {})))
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
    tr = sub.add_parser("train", help="behaviour-cloning warm-up, then trust-region RL")
    tr.add_argument("--config", default=DEFAULT_CONFIG)
    tr.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    tr.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    tr.add_argument("--overwrite", action="store_true", help="delete an existing run_dir first")
    tr.set_defaults(run=cmd_train)
    ev = sub.add_parser("eval", help="evaluate coordinator policies on a world")
    ev.add_argument("--policy", nargs="+", choices=sorted(eval_policies.POLICIES),
                    help="default: trained with --checkpoint, else oracle")
    ev.add_argument("--checkpoint", metavar="DIR", help="a run directory or checkpoint folder")
    ev.add_argument("--config", help=f"config for LLM policies (default: the run's, else {DEFAULT_CONFIG})")
    ev.add_argument("--env", help="world (default: the config's env.name)")
    ev.add_argument("--episodes", type=int, default=500)
    ev.add_argument("--seed", type=int, default=1_000_000, help="first seed (held-out seeds by default)")
    ev.add_argument("--suite", default="heldout", choices=("heldout", "generalisation"))
    ev.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    ev.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    ev.set_defaults(run=cmd_eval)
    rp = sub.add_parser("report", help="PNG curves and an HTML page for a run")
    rp.add_argument("run_dir")
    rp.set_defaults(run=cmd_report)
    dr = sub.add_parser("doctor", help="name the troubleshooting symptoms a run shows")
    dr.add_argument("run_dir")
    dr.add_argument("--strict", action="store_true", help="exit 1 when something is found")
    dr.set_defaults(run=cmd_doctor)
    play = sub.add_parser("play", help="be the coordinator yourself, in the terminal")
    play.add_argument("env", nargs="?", default=None)
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
