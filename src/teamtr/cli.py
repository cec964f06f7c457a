"""teamtr: train an LLM coordinator for a team of agents with trust-region RL.

examples:
  teamtr envs                                             the worlds and their options
  teamtr config show default --set algo.clip_eps=0.1      the resolved config
  teamtr train --config default                           BC warm-up + PPO on escape-room (shipped config)
  teamtr train --config my.yaml --set rollout.episodes=32
  teamtr train --resume runs/default                      continue from the last complete checkpoint
  teamtr branch runs/default --at 16                      a new run from iteration 16's checkpoint (runs/default-at16)
  teamtr eval --policy oracle random --env software-team --set env.engineers=4 --episodes 500
  teamtr eval --checkpoint runs/default --suite generalisation --episodes 200
  teamtr report runs/default ; teamtr doctor runs/default ; teamtr status
  teamtr play escape-room --set env.names=heldout
  teamtr sweep software_team --seeds 0 1 2               one run per seed, then mean ± std
  teamtr serve runs/default --port 8000                   an OpenAI-compatible endpoint (127.0.0.1)
  teamtr export runs/default --merged exported/           a transformers model directory, adapter merged
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from pathlib import Path

from teamtr.atomic import atomic_write_text, write_json
from teamtr.config import Config, dump_config, load_config, shipped_configs
from teamtr.core import TeamTRError
from teamtr.envs import info, make, names, options
from teamtr.telemetry.log import EVAL_TRANSCRIPTS_FILE, FINAL_EVAL_FILE, FINAL_PARTIAL_FILE
from teamtr.eval import policies as eval_policies
from teamtr.eval.suites import eval_options, evaluate_table, suites, table_columns
from teamtr.eval.team_agents import agent_factory, check_team
from teamtr.serve import add_commands
from teamtr.team import Team
from teamtr.telemetry.metrics import METRICS

DEFAULT_CONFIG = "default"  # the shipped config (src/teamtr/configs/default.yaml)


def cmd_envs(_: argparse.Namespace) -> int:
    """Each world: its description (and missing extra), then its options with their defaults."""
    import inspect

    width = max(map(len, names()))
    for name in names():
        print(f"{name:<{width}}  {info(name)}")
        try:
            found = options(name)
        except TeamTRError:
            continue  # a missing extra or a broken plug-in: info() already says which
        shown = ", ".join(k if v is inspect.Parameter.empty else f"{k}={'auto' if v is None else repr(v)}"
                          for k, v in found.items())
        print(f"{'':<{width}}  options: {shown or 'none'}")
    print("(auto: the world derives the value from its other options, e.g. overcooked's goal_soups from the layout)")
    return 0


def format_table(rows: dict[str, dict[str, float]], columns: Sequence[str] = METRICS) -> str:
    """A plain-text table: one row per label, one column per metric (``table_columns(env)``: the
    world's headline metrics too, as mean ± std over the episodes where the row has ``<metric>_std``)."""
    from teamtr.telemetry.metrics import with_spread

    cells = {label: {c: with_spread(row, c) or "" for c in columns} for label, row in rows.items()}
    width = max(8, *map(len, rows))
    sizes = {c: max(8, len(c), *(len(cells[label][c]) for label in rows)) for c in columns}
    head = f"{'policy':<{width}} " + " ".join(f"{c:>{sizes[c]}}" for c in columns)
    lines = [head, "-" * len(head)]
    for label in rows:
        lines.append(f"{label:<{width}} " + " ".join(f"{cells[label][c]:>{sizes[c]}}" for c in columns))
    return "\n".join(lines)


def _config(path: str | None, sets: Sequence[str], run_dir: Path | None = None) -> Config:
    """The config of an eval/play command: ``--config``, else the run's, else the shipped default."""
    if path is None and run_dir is not None and (run_dir / "config.yaml").is_file():
        path = str(run_dir / "config.yaml")
    return load_config(path or DEFAULT_CONFIG, list(sets))


def _with_env(env: str | None, sets: Sequence[str]) -> list[str]:
    """``--env X`` is ``--set env.name=X`` given first, so ``--set env.k=v`` options apply to X."""
    return ([f"env.name={env}"] if env else []) + list(sets)


def resolve_checkpoint(path: str) -> tuple[Path, Path]:
    """``teamtr.train.checkpoint.resolve_checkpoint`` (imported when called: it needs torch)."""
    from teamtr.train.checkpoint import resolve_checkpoint as resolve

    return resolve(path)


def build_policies(names_: Sequence[str], config: Config, checkpoint: Path | None, seed: int,
                   single: bool = False) -> dict[str, Any]:
    """The policies of ``names_`` for ``config``'s run; ``single``: the coordinator scores candidates
    whatever the run's ``team.directives`` (``play`` shows its top 3 candidates)."""
    def coordinator() -> Any:
        from teamtr.policy.coordinator import build_coordinator

        built = build_coordinator(config)
        if checkpoint is not None:
            built.load(checkpoint)
        return built

    return eval_policies.build_policies(names_, seed=seed, coordinator=coordinator, trained=checkpoint is not None,
                                        **({} if single else directing(config)),
                                        hierarchy=config.team.hierarchy)


def directing(config: Config) -> dict[str, Any]:
    """How the coordinator policies direct: the run's ``team.directives`` (and free text's length)."""
    return {"directives": config.team.directives, "max_new_tokens": config.policy.max_new_tokens}


def cmd_eval(args: argparse.Namespace) -> int:
    policy_names = args.policy or (["trained"] if args.checkpoint else ["oracle"])
    if "trained" in policy_names and not args.checkpoint:
        raise TeamTRError("--policy trained needs --checkpoint RUN_DIR (or a checkpoint folder).")
    checkpoint, run_dir = resolve_checkpoint(args.checkpoint) if args.checkpoint else (None, None)
    config = _config(args.config, _with_env(args.env, args.set), run_dir)
    env, options = config.env.name, eval_options(config.env.options(), config.train.eval_env)
    check_team(config, make(env, **options))  # bad worlds, options, agent names fail before any model loads
    policies = build_policies(policy_names, config, checkpoint, args.seed)
    seeds = list(range(args.seed, args.seed + args.episodes))
    coordinator = next((p.coordinator for p in policies.values() if hasattr(p, "coordinator")), None)
    rows = evaluate_table(env, suites(env, options, args.suite), policies, seeds, rewards=config.rewards.composer(),
                          history_len=config.team.history_len, make_agent=agent_factory(config, coordinator))
    shown = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    print(f"{env} ({shown}), {args.episodes} episodes from seed {args.seed}")
    print(format_table(rows, table_columns(env)))
    if args.json:
        write_json(Path(args.json), {"env": env, "options": options, "episodes": args.episodes,
                                     "seed": args.seed, "columns": list(table_columns(env)), "rows": rows})
        print(f"wrote {args.json}")
    return 0


def _is_run_dir(path: Path) -> bool:
    return any((path / name).exists() for name in ("config.yaml", "metrics.jsonl", "checkpoints"))


def _remove_run(run_dir: Path) -> None:
    """Delete a run for ``--overwrite``, holding its lock meanwhile: a trainer still writing it is
    refused, and the lock file stays so that no second trainer slips in through a fresh one."""
    import shutil

    from teamtr.train.lock import LOCK_NAME, RunLock

    lock = RunLock(run_dir)
    try:
        for entry in run_dir.iterdir():
            if entry.name == LOCK_NAME:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    finally:
        lock.release()


def _preflight(config: Config, fresh: bool = True) -> None:
    """Checks that would otherwise fail after the model load, leaving a half-made run behind (``fresh``:
    a new run, whose ``model.init`` must resolve; a resumed one no longer reads it)."""
    import importlib.util

    if fresh and config.model.init:
        try:
            resolve_checkpoint(config.model.init)
        except TeamTRError as err:
            raise TeamTRError(f"model.init={config.model.init}: {err}") from None
    make(config.env.name, **config.env.options())
    if config.train.eval_env:
        make(config.env.name, **eval_options(config.env.options(), config.train.eval_env))
    for k, stage in enumerate(config.curriculum.stages):  # a stage's options belong to this world too
        try:
            make(config.env.name, **{**config.env.options(), **stage.env})
        except TeamTRError as err:
            raise TeamTRError(f"curriculum.stages[{k}].env: {err}") from None
    if config.log.wandb and importlib.util.find_spec("wandb") is None:
        raise TeamTRError("log.wandb is true but wandb is not installed: run pip install 'teamtr[wandb]', "
                          "or --set log.wandb=false.")


def _train_config(args: argparse.Namespace) -> Config:
    """The run's config, checked, and its directory ready (``--overwrite`` only removes a run)."""
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").is_file():
            raise TeamTRError(f"--resume {run_dir}: not a run directory (no config.yaml); give the directory "
                              "`teamtr train` wrote.")
        config = load_config(run_dir / "config.yaml", [*args.set, f"run_dir={run_dir}"])
        _preflight(config, fresh=False)
        return config
    config = load_config(args.config, args.set)
    _preflight(config)
    run_dir = Path(config.run_dir)
    if run_dir.is_symlink() or (run_dir.exists() and not run_dir.is_dir()):
        raise TeamTRError(f"run_dir {run_dir} is a file or a link, not a directory; --set run_dir=runs/NEW.")
    if run_dir.exists() and _is_run_dir(run_dir):
        if not args.overwrite:
            raise TeamTRError(f"run_dir {run_dir} already holds a run: --resume {run_dir} to continue it, "
                              "--overwrite to start over, or --set run_dir=runs/NEW.")
        _remove_run(run_dir)
    elif run_dir.exists() and any(p.name != ".lock" for p in run_dir.iterdir()):
        raise TeamTRError(f"run_dir {run_dir} exists and holds files that are not a TeamTR run; nothing was "
                          "deleted: --set run_dir=runs/NEW.")
    return config


def final_table(trainer: Any, config: Config) -> dict[str, dict[str, float]]:
    """The end-of-run table on held-out seeds: trained, bc (the warm start before RL, ``RUN/bc``: the
    run's behaviour clone or the ``model.init`` adapter, when RL then ran), zero-shot, random and the
    world's expert (``oracle``, or ``heuristic``), on the trainer's model (zero-shot: its adapter
    switched off; bc: the ``RUN/bc`` snapshot in its place); the coordinator rows direct in the run's
    ``team.directives`` mode."""
    from teamtr.envs import world_class

    env = config.env.name
    expert = eval_policies.expert_name(world_class(env))
    baselines = [expert if b in eval_policies.EXPERT_NAMES else b for b in config.train.final_baselines]
    policies = eval_policies.build_policies(("trained", "zero-shot", *baselines), seed=config.seed,
                                            coordinator=trainer.coordinator, hierarchy=config.team.hierarchy,
                                            **directing(config))
    bc_dir = Path(config.run_dir) / "bc"
    if config.train.iterations > 0 and bc_dir.is_dir():
        # the warm start alone (this run's clone, or model.init's adapter) beside it + RL, in one table
        state = trainer.coordinator.read_adapter(bc_dir)
        if config.team.hierarchy.enabled:  # both levels' adapters as cloned
            from teamtr.policy.levels import read_levels

            cloned: Any = eval_policies.HierarchicalPolicy(trainer.coordinator, policies["trained"].schedule,
                                                           state={**state, **read_levels(trainer.coordinator, bc_dir)})
        else:
            cloned = eval_policies.ClonedPolicy(trainer.coordinator, state, **directing(config))
        policies = {"trained": policies.pop("trained"), "bc": cloned, **policies}
    table_suites = suites(env, eval_options(config.env.options(), config.train.eval_env), config.train.final_suite)
    n = config.train.final_eval_episodes
    counts = {name: n for name in policies}
    counts["zero-shot"] = min(n, config.train.final_zero_shot_episodes)
    if "bc" in counts and config.train.final_bc_episodes is not None:
        counts["bc"] = min(n, config.train.final_bc_episodes)
    off = config.train.eval_seed_offset
    run_dir = Path(config.run_dir)
    # A table killed part-way (a session's end) resumes at the next policy: each finished policy's rows
    # and episodes are kept in FINAL_PARTIAL_FILE, valid only for the same trained iteration and table.
    key = json.loads(json.dumps({"iteration": trainer.iteration, "episodes": counts, "seed_offset": off,
                                 "suites": table_suites, "policies": list(policies)}, default=str))
    rows, transcripts = _play_final_table(trainer, config, policies, counts, table_suites, key)
    shown = ", ".join(f"{k} {v}" for k, v in counts.items())
    print(f"\n{env}: held-out seeds from {off} ({shown} episodes)")
    columns = table_columns(env)
    print(format_table(rows, columns))
    atomic_write_text(run_dir / EVAL_TRANSCRIPTS_FILE, "".join(json.dumps(t) + "\n" for t in transcripts))
    write_json(run_dir / FINAL_EVAL_FILE, {"episodes": counts, "columns": list(columns), "rows": rows})
    (run_dir / FINAL_PARTIAL_FILE).unlink(missing_ok=True)
    return rows


def _play_final_table(trainer: Any, config: Config, policies: dict[str, Any], counts: dict[str, int],
                      table_suites: Any, key: dict[str, Any]) -> tuple[dict[str, dict[str, float]], list[Any]]:
    """Each policy's rows and episodes of the end-of-run table, a policy at a time; a finished policy is
    saved to FINAL_PARTIAL_FILE at once, and one already there for the same ``key`` is not played again."""
    run_dir, off = Path(config.run_dir), config.train.eval_seed_offset
    partial = _read_partial_table(run_dir / FINAL_PARTIAL_FILE, key)
    rows: dict[str, dict[str, float]] = {}
    transcripts: list[dict[str, Any]] = []  # every episode, for the report's episode viewer
    for name, policy in policies.items():
        if name in partial:
            print(f"final table: {name} rows kept from the interrupted table ({FINAL_PARTIAL_FILE})")
            rows.update(partial[name]["rows"])
            transcripts.extend(partial[name]["transcripts"])
            continue
        if counts[name]:
            episodes: list[dict[str, Any]] = []
            done = evaluate_table(config.env.name, table_suites, {name: policy},
                                  list(range(off, off + counts[name])), rewards=trainer.rewards,
                                  history_len=config.team.history_len, transcripts=episodes,
                                  make_agent=trainer.make_agent)
            rows.update(done)
            transcripts.extend(episodes)
            partial[name] = {"rows": done, "transcripts": episodes}
            write_json(run_dir / FINAL_PARTIAL_FILE, {"key": key, "done": partial})
    return rows, transcripts


def _read_partial_table(path: Path, key: dict[str, Any]) -> dict[str, Any]:
    """The finished policies of an interrupted end-of-run table at ``path``, if it was played for the
    same ``key`` (trained iteration, episodes, seeds, suites, policies); else nothing (it is replaced)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict) or saved.get("key") != key or not isinstance(saved.get("done"), dict):
        return {}
    return saved["done"]


def cmd_train(args: argparse.Namespace) -> int:
    from teamtr.train.distributed import Distributed
    from teamtr.train.trainer import Trainer

    dist = Distributed.from_env()  # under torchrun: rank 0 prepares the run directory and alone writes it
    config = dist.from_main(lambda: _train_config(args))
    if not dist.is_main:
        with Trainer(config, resume=bool(args.resume), dist=dist) as trainer:
            trainer.run()
        dist.close()
        return 0
    print(f"run directory: {config.run_dir}")
    trainer = Trainer(config, resume=bool(args.resume), dist=dist)
    try:
        trainer.run()
        if config.train.final_eval_episodes:
            from teamtr.train.card import write_model_card

            final_table(trainer, config)
            write_model_card(config.run_dir)  # the newest checkpoint's card gains the table
    finally:
        trainer.close()
        dist.close()
    try:
        from teamtr.telemetry.report import write_report

        print(f"report: {write_report(config.run_dir)}")
    except Exception as err:  # noqa: BLE001 - the run is complete; the report is made from its files, again at will
        print(f"teamtr: the run is complete (checkpoints and table written), but its report could not be made "
              f"({type(err).__name__}: {err}); `teamtr report {config.run_dir}` tries again.", file=sys.stderr)
    return 0


def _finished(run: Path) -> tuple[int, Path | None] | None:
    """A run that wrote its end-of-run table: how many iterations it trained and its newest complete
    checkpoint (the iterations are that checkpoint's, or, where it keeps none (pruned to save disk, or
    copied without them), its last training row's in ``metrics.jsonl``; 0 for cloning alone). None
    while it has no table."""
    from teamtr.telemetry.log import read_metrics
    from teamtr.train.checkpoint import checkpoint_iteration, latest_checkpoint

    if not (run / FINAL_EVAL_FILE).is_file():
        return None
    newest = latest_checkpoint(run)
    if newest is not None:
        return checkpoint_iteration(newest), newest
    return max((int(r["iteration"]) for r in read_metrics(run) if r.get("kind") == "train"), default=0), None


def _sweep_jobs(cells: list[tuple[str, list[str]]], configs: dict[str, Config], runs: dict[str, dict[int, Path]],
                sets: list[str]) -> list[tuple[str, list[str], Path]]:
    """The runs a sweep still has to train (name, ``--set`` items, run directory): those without their
    table, and finished ones that trained fewer iterations than their config now asks for."""
    jobs: list[tuple[str, list[str], Path]] = []
    for label, cell_sets in cells:
        for seed, run in runs[label].items():
            name = f"{label} seed {seed}" if label else f"seed {seed}"
            wanted = configs[label].train.iterations
            finished = _finished(run)
            if finished is not None:
                done_at, checkpoint = finished
                if done_at >= wanted:
                    print(f"sweep: {name} done ({run})")
                    continue
                if checkpoint is None:
                    raise TeamTRError(f"sweep: {name} ({run}) finished {done_at} iterations and keeps no checkpoint, "
                                      f"so it cannot be extended to {wanted}; give the sweep a new --out to train it "
                                      "again, or ask for the iterations it has")
                # a finished run asked for more iterations resumes; its table is redone
                print(f"sweep: {name} finished {done_at} iterations; extending it to {wanted}")
            jobs.append((name, [*sets, *cell_sets, f"seed={seed}", f"run_dir={run}"], run))
    return jobs


def cmd_sweep(args: argparse.Namespace) -> int:
    """Train one run per seed, or per grid cell and seed (one after another, or ``--parallel N`` at a
    time); a killed sweep continues where it stopped, and a finished one given more ``train.iterations``
    resumes each run from its last checkpoint to that many (its table then redone)."""
    from teamtr.telemetry.compare import mean_std
    from teamtr.train.sweep import grid_cells, sweep_summary, train_parallel

    cells = grid_cells(args.grid or [], args.set)
    configs = {label: load_config(args.config, [*args.set, *cell_sets]) for label, cell_sets in cells}
    for checked in configs.values():  # a bad config, world option, warm start or grid value fails before any run
        _preflight(checked)
    out = Path(args.out or f"runs/sweep-{Path(args.config).stem}")
    runs = {label: {seed: (out / label if label else out) / f"seed_{seed}" for seed in args.seeds}
            for label, _ in cells}
    jobs = _sweep_jobs(cells, configs, runs, args.set)
    if args.parallel > 1 and len(jobs) > 1:
        train_parallel(args.config, jobs, args.parallel)
    else:
        for name, sets, run in jobs:
            resume = (run / "config.yaml").is_file()
            print(f"sweep: {name} -> {run}" + (" (resuming)" if resume else ""))
            cmd_train(argparse.Namespace(config=args.config, set=sets, resume=str(run) if resume else None,
                                         overwrite=False))
    command = shlex.join(["teamtr", "sweep", args.config, "--seeds", *map(str, args.seeds),
                          *(x for g in args.grid or [] for x in ("--grid", g)), *(x for s in args.set for x in ("--set", s))])
    summaries: dict[str, Any] = {}
    for label, cell_sets in cells:
        resolved = configs[label].model_dump(mode="json")
        summary = {"command": command, **({"cell": cell_sets} if label else {}),
                   "config": {k: v for k, v in resolved.items() if k not in ("seed", "run_dir")},
                   **sweep_summary(runs[label])}
        write_json((out / label if label else out) / "sweep.json", summary)
        summaries[label] = summary
    if args.grid:  # every cell's summary in one file, and a line per cell
        result = {"command": command, "grid": list(args.grid), "seeds": list(args.seeds), "cells": summaries}
        write_json(out / "sweep.json", result)
    else:
        result = summaries[""]
    if args.json:
        write_json(Path(args.json), result)
        print(f"wrote {args.json}")
    one = len(args.seeds) == 1  # one seed: its table's values, not a spread of 0 over one run
    print(f"\n{len(args.seeds)} seed{'' if one else 's'} ({', '.join(map(str, args.seeds))}): "
          + ("its final table" if one else "mean ± std of the final tables"))
    for label, summary in summaries.items():
        if label:
            print(f" {label} ({out / label})")
        for policy, metrics in summary["rows"].items():
            shown = ", ".join(f"{m} {mean_std(v)}" for m, v in metrics.items() if m in ("success", "return", "length"))
            print(f"  {policy:<10} {shown}")
    if args.grid:
        dirs = [str(out / label) for label, _ in cells]
        print("curves and the comparison table: " + shlex.join(["teamtr", "report", dirs[0], *(
            ["--compare", *dirs[1:]] if len(dirs) > 1 else [])]))
    print(f"wrote {out / 'sweep.json'}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.action == "list":
        print("\n".join(shipped_configs()))
        return 0
    print(dump_config(load_config(args.name, args.set)), end="")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if args.compare:
        from teamtr.telemetry.compare import write_comparison

        out = Path(args.out or "runs/compare")
        command = shlex.join(["teamtr", "report", args.run_dir, "--compare", *args.compare,
                              *(x for label in args.label or () for x in ("--label", label)),
                              "--threshold", f"{args.threshold:g}", "--out", str(out)])
        write_comparison([args.run_dir, *args.compare], out, args.label, args.threshold, command)
        print((out / "compare.md").read_text(), end="")
        print(f"wrote {out / 'compare.json'}, {out / 'compare.md'} and the figures in {out}")
        return 0
    from teamtr.telemetry.report import write_report

    print(write_report(args.run_dir))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from teamtr.train.status import find_runs, format_status, run_status

    runs = find_runs(args.paths or ["runs"])
    if not runs:
        print(f"no runs under {', '.join(args.paths or ['runs'])} (a run is a directory with a config.yaml)")
        return 0
    rows = [run_status(run) for run in runs]
    print(json.dumps(rows, indent=1) if args.json else format_status(rows))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from teamtr.telemetry.doctor import diagnose, format_findings

    findings = diagnose(args.run_dir)
    print(format_findings(findings))
    return 1 if findings and args.strict else 0


def cmd_branch(args: argparse.Namespace) -> int:
    from teamtr.train.branch import branch_run

    branch_run(Path(args.run_dir), args.at, Path(args.to) if args.to else None)
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """Play one episode as the coordinator (``teamtr.play``); with ``--checkpoint`` the trained
    coordinator shows its top 3 each tick, and with ``--auto`` plays on its own."""
    from teamtr.play import play

    if args.auto and not args.checkpoint:
        raise TeamTRError("--auto needs --checkpoint RUN_DIR (a trained coordinator to play).")
    checkpoint, run_dir = resolve_checkpoint(args.checkpoint) if args.checkpoint else (None, None)
    config = _config(None, _with_env(args.env, args.set), run_dir)
    team = Team(make(config.env.name, **config.env.options()), rewards=config.rewards.composer(),
                history_len=config.team.history_len)
    advisor = None
    if checkpoint is not None:
        policy = build_policies(["trained"], config, checkpoint, args.seed, single=True)["trained"]

        def advisor(state: Any) -> list[float]:
            policy.choose([state])
            return policy.last_probs[0]

    return play(team, args.seed, advisor, auto=args.auto)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number (give 1 or more)")
    return value


def _sub(sub: Any, name: str, help_: str, examples: str, run: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_, description=help_, epilog="examples:\n" + examples,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(run=run)
    return parser


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config key (repeatable), e.g. --set env.agents=4")


def _add_report(sub: Any) -> None:
    rp = _sub(sub, "report", "PNG curves and an HTML page for a run; --compare: several runs on one plot",
              "  teamtr report runs/default\n  teamtr report runs/sweep-default --compare runs/sweep-ppo_alone "
              "--out runs/compare\n", cmd_report)
    rp.add_argument("run_dir", help="a run, or a sweep directory (its seed_N runs) with --compare")
    rp.add_argument("--compare", nargs="+", metavar="RUN", default=[],
                    help="more runs or sweep directories: curves with a mean ± std band per group, and a table")
    rp.add_argument("--label", action="append", help="group label per run (default: a sweep's directory name)")
    rp.add_argument("--threshold", type=float, default=0.9, help="success level for decisions_to_X (default 0.9)")
    rp.add_argument("--out", help="where --compare writes its figures and table (default runs/compare)")


def _add_sweep(sub: Any) -> None:
    sw = _sub(sub, "sweep", "train one run per seed (or per grid cell and seed), one after another or N at a time "
                          "(resumable; more train.iterations extends finished runs), then mean ± std",
              "  teamtr sweep default --seeds 0 1 2 --set algo.name=trpo --out runs/trpo\n"
              "  teamtr sweep software_team --seeds 0 1 --parallel 2   # 2 seeds at once, 1 thread each on 2 cores\n"
              "  teamtr sweep default --seeds 0 1 2 --set train.iterations=40   # finished 30-iteration runs go on to 40\n"
              "  teamtr sweep trust_region --seeds 0 1 2 --grid algo.name=pg,ppo,grpo --grid algo.lr=3e-5,3e-4 \\\n"
              "      --set model.init=runs/tr-init/bc --parallel 2 --out runs/tr   # 2 x 3 cells x 3 seeds\n", cmd_sweep)
    sw.add_argument("config", help="a YAML file or a shipped config")
    sw.add_argument("--seeds", nargs="+", type=int, required=True)
    sw.add_argument("--out", help="the sweep's directory (default runs/sweep-CONFIG); one run per seed inside "
                                  "(with --grid: OUT/CELL/seed_S, e.g. OUT/name=pg_lr=3e-4/seed_0)")
    sw.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                    help="a setting to vary (repeatable): every combination of the grids' values is trained "
                         "for every seed, each in its own directory with its own sweep.json")
    sw.add_argument("--json", help="also write the summary (with the resolved config) here, e.g. results/X.json")
    sw.add_argument("--parallel", type=_positive_int, default=1, metavar="N",
                    help="train N runs at a time, each a child process with 1/N of the CPU threads and its "
                         "log beside its run, OUT/[CELL/]seed_S.log (default 1: one after another, in this process)")
    _add_set(sw)


def _add_run_tools(sub: Any) -> None:
    """The commands that read or copy run directories: doctor, status, branch."""
    dr = _sub(sub, "doctor", "name the troubleshooting symptoms a run shows", "  teamtr doctor runs/default\n",
              cmd_doctor)
    dr.add_argument("run_dir")
    dr.add_argument("--strict", action="store_true", help="exit 1 when something is found")
    st = _sub(sub, "status", "where each run stands: running or not, iteration, success, time left",
              "  teamtr status                 every run under runs/\n  teamtr status runs/sweep-default\n", cmd_status)
    st.add_argument("paths", nargs="*", help="runs or folders of runs (default: runs)")
    st.add_argument("--json", action="store_true", help="print JSON, one object per run")
    br = _sub(sub, "branch", "a new run standing at an earlier checkpoint of a run (to continue it another way)",
              "  teamtr branch runs/default --at 16                 makes runs/default-at16\n"
              "  teamtr train --resume runs/default-at16 --set algo.lr=3e-4\n", cmd_branch)
    br.add_argument("run_dir")
    br.add_argument("--at", type=int, required=True, metavar="N", help="the iteration whose checkpoint to start from")
    br.add_argument("--to", metavar="DIR", help="the new run's directory (default: RUN_DIR-atN)")


def build_parser() -> argparse.ArgumentParser:
    from teamtr import __version__

    parser = argparse.ArgumentParser(prog="teamtr", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"teamtr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _sub(sub, "envs", "list the worlds, their options and the extras they need", "  teamtr envs\n", cmd_envs)
    tr = _sub(sub, "train", "behaviour-cloning warm-up, then trust-region RL",
              "  teamtr train --config default\n  teamtr train --config my.yaml --set algo.name=trpo\n"
              "  teamtr train --resume runs/default\n", cmd_train)
    tr.add_argument("--config", default=DEFAULT_CONFIG, help=f"a YAML file or a shipped config "
                    f"({', '.join(shipped_configs())}; default {DEFAULT_CONFIG})")
    _add_set(tr)
    tr.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last complete checkpoint")
    tr.add_argument("--overwrite", action="store_true", help="delete the run already in run_dir first")
    ev = _sub(sub, "eval", "evaluate coordinator policies on a world",
              "  teamtr eval --policy oracle random noop first --env software-team --set env.engineers=4\n"
              "  teamtr eval --checkpoint runs/default --suite generalisation --episodes 200\n", cmd_eval)
    ev.add_argument("--policy", nargs="+", choices=sorted(eval_policies.POLICIES),
                    help="default: trained with --checkpoint, else the world's expert (oracle, or heuristic: "
                    "either word; the row takes the world's)")
    ev.add_argument("--checkpoint", metavar="DIR", help="a run directory or checkpoint folder")
    ev.add_argument("--config", help=f"config for LLM policies (default: the run's, else {DEFAULT_CONFIG})")
    ev.add_argument("--env", help="world: a registered name or module:Class (default: the config's env.name)")
    ev.add_argument("--episodes", type=_positive_int, default=500)
    ev.add_argument("--seed", type=int, default=1_000_000, help="first seed (held-out seeds by default)")
    ev.add_argument("--suite", default="heldout", choices=("heldout", "generalisation"))
    _add_set(ev)
    ev.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    _add_sweep(sub)
    cf = _sub(sub, "config", "print a shipped or given config, resolved with --set overrides",
              "  teamtr config show default --set algo.lr=1e-4\n  teamtr config list\n", cmd_config)
    cf.add_argument("action", choices=("show", "list"))
    cf.add_argument("name", nargs="?", default=DEFAULT_CONFIG, help="a shipped config or a YAML file")
    _add_set(cf)
    _add_report(sub)
    _add_run_tools(sub)  # doctor, status, branch
    play = _sub(sub, "play", "be the coordinator yourself, in the terminal, or watch a trained one",
                "  teamtr play escape-room --set env.names=heldout\n"
                "  teamtr play --checkpoint runs/default          its top 3 suggestions each tick\n"
                "  teamtr play --checkpoint runs/default --auto   it plays on its own (greedy)\n", cmd_play)
    play.add_argument("env", nargs="?", default=None, help="world (default: the run's, else the config's)")
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--checkpoint", metavar="DIR", help="a run directory or checkpoint folder: the trained "
                      "coordinator suggests its top 3 directives with probabilities")
    play.add_argument("--auto", action="store_true", help="with --checkpoint: it plays greedily, printing each tick")
    _add_set(play)
    add_commands(sub)  # serve, export
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from teamtr.train.interrupt import Terminated, terminate_as_interrupt

    args = build_parser().parse_args(argv)
    try:
        with terminate_as_interrupt():  # `kill PID` stops a run as Ctrl-C does: resumable, with its hint
            return args.run(args)
    except TeamTRError as err:
        print(f"teamtr: error: {err}", file=sys.stderr)
        return 2
    except Terminated:
        print("\nteamtr: terminated (SIGTERM).", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("\nteamtr: interrupted.", file=sys.stderr)
        return 130
    except EOFError:
        return 130


if __name__ == "__main__":
    sys.exit(main())
