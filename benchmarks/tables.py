"""The README's result tables, generated from ``results/*.json`` (never typed by hand).

A table in the README sits between two markers that name its kind and its files::

    <!-- results: sweep results/sweep_software_team.json -->
    ...generated...
    <!-- /results -->

Kinds: ``worlds`` (``teamtr eval --json`` files of scripted baselines: success per policy with the
options the command resolved), ``sweep`` (``teamtr sweep --json``: mean ± std over seeds per policy,
with the command and the resolved world), ``compare`` (``teamtr report --compare``'s compare.json) and
``agents`` (``benchmarks/llm_agents.py --out``: a coordinator with scripted vs LLM role agents) and
``world`` (one world's table from several ``teamtr sweep --json`` files: baselines, BC, PPO alone,
BC + PPO, each row mean ± std over its seeds, labelled by the recipe its config resolved) and ``layouts``
(a run over several layouts, Overcooked: soups per layout and policy).

    python benchmarks/tables.py sweep results/sweep_software_team.json   # print one table
    python benchmarks/tables.py --update README.md                       # regenerate every marked block
    python benchmarks/tables.py --check README.md                        # exit 1 when a block is stale
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- results: (\w+) ([^>]*?) -->\n)(.*?)(<!-- /results -->)", re.DOTALL)
SWEEP_COLUMNS = (("success", "success"), ("return", "return"), ("length", "length"),
                 ("idle_rate", "idle rate"), ("comm_effectiveness", "comm. effectiveness"),
                 ("invalid_rate", "invalid rate"))
AGENT_COLUMNS = (("success", "success"), ("return", "return"), ("comm_effectiveness", "comm. effectiveness"),
                 ("invalid_rate", "invalid rate"), ("ignored_rate", "ignored rate"),
                 ("reply_invalid", "unusable replies / episode"), ("remote_fallback", "fallbacks / episode"),
                 ("seconds", "seconds"))
COMPARE_COLUMNS = (("final", "final success"), ("final_return", "final return"),
                   ("final_invalid_rate", "final invalid rate"), ("best", "best"), ("worst_drop", "worst drop"),
                   ("collapsed", "collapsed"), ("kl_per_update", "KL per update"),
                   ("last_return", "last return"), ("last_entropy", "last entropy"))


def _load(path: str) -> dict[str, Any]:
    return json.loads((ROOT / path).read_text())


def _options(options: dict[str, Any]) -> str:
    return "`" + ", ".join(f"{k}={v}" for k, v in options.items()) + "`" if options else "defaults"


def worlds(files: list[str]) -> str:
    """Success per scripted policy, one row per ``teamtr eval --json`` file."""
    loaded = [(f, _load(f)) for f in files]
    policies = list(dict.fromkeys(p for _, d in loaded for p in d["rows"]))
    lines = ["| world | resolved options | episodes | " + " | ".join(policies) + " | oracle length |",
             "|---" * (len(policies) + 4) + "|"]
    for _, d in loaded:
        rows = d["rows"]
        cells = [f"{rows[p]['success']:.3f}" if p in rows else "-" for p in policies]
        length = f"{rows['oracle']['length']:.2f}" if "oracle" in rows else "-"
        lines.append(f"| {d['env']} | {_options(d['options'])} | {d['episodes']} | " + " | ".join(cells)
                     + f" | {length} |")
    return "\n".join(lines) + "\n"


def _pm(stat: dict[str, Any] | None, digits: int = 3) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    if len(stat.get("values") or ()) == 1:  # one seed: its value, not a spread of 0 it never measured
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def sweep(files: list[str]) -> str:
    """Mean ± std over seeds per policy, one block per ``teamtr sweep --json`` file (a grid's file: one
    block per cell, headed by the cell's settings)."""
    out = []
    for f in files:
        whole = _load(f)
        for cell, d in (whole["cells"].items() if "cells" in whole else [("", whole)]):
            env = dict(d["config"]["env"])
            name = env.pop("name")
            where = f"cell `{cell}` ({', '.join(d['cell'])}) of " if cell else ""
            tested = d["config"]["train"].get("eval_env") or {}  # the rows' world, where it is not the training one
            world = _options(env) + (f"; tested with {_options(tested)}" if tested else "")
            out.append(f"{where}`{d['command']}`: {name} ({world}), seeds {', '.join(map(str, d['seeds']))}, "
                       f"held-out seeds from {d['config']['train']['eval_seed_offset']:,}, greedy; "
                       + ("one seed" if len(d["seeds"]) == 1 else "mean ± std over seeds") + " (`" + f + "`)\n")
            _sweep_rows(out, d)
    return "\n".join(out)


def _sweep_rows(out: list[str], d: dict[str, Any]) -> None:
    out.append("| policy | " + " | ".join(label for _, label in SWEEP_COLUMNS) + " |")
    out.append("|---" * (len(SWEEP_COLUMNS) + 1) + "|")
    for policy, row in d["rows"].items():
        digits = {"return": 2, "length": 1}
        cells = [_pm(row.get(key), digits.get(key, 3)) for key, _ in SWEEP_COLUMNS]
        out.append(f"| {policy} | " + " | ".join(cells) + " |")
    out.append("")


def compare(files: list[str]) -> str:
    """The trust-region table of ``teamtr report --compare`` (compare.json): a block per file, headed by
    its command and world, one row per group with the algorithm, LR and seeds its runs resolved."""
    out = []
    for f in files:
        d = _load(f)
        groups = d["groups"]
        envs = [row.get("settings", {}).get("env") for row in groups.values()]
        env = dict(envs[0]) if envs and envs[0] and all(e == envs[0] for e in envs) else None
        world = f"{env.pop('name')} ({_options(env)})" if env else "worlds differ per group"
        out.append(f"`{d.get('command') or 'teamtr report --compare'}`: {world}; success of the sampled "
                   f"training episodes per iteration; final columns = the end-of-run table's greedy trained row (`{f}`)\n")
        x = f"{d.get('threshold', 0.9):g}"
        # greedy: from held-out evaluations (train.eval_every), shown when some group was evaluated ("-": not)
        reach = [f"decisions_to_{x}"] + [f"greedy_{k}_to_{x}" for k in ("decisions", "seconds")
                                         if any(f"greedy_{k}_to_{x}" in r for r in groups.values())]
        heads = {f"decisions_to_{x}": f"decisions to {x}", f"greedy_decisions_to_{x}": f"decisions to {x} greedy",
                 f"greedy_seconds_to_{x}": f"seconds to {x} greedy"}
        out.append("| runs | algorithm | LR (TRPO: KL bound) | noise, replay | seeds | "
                   + " | ".join(label for _, label in COMPARE_COLUMNS) + " | " + " | ".join(heads[k] for k in reach) + " |")
        out.append("|---" * (len(COMPARE_COLUMNS) + 5 + len(reach)) + "|")
        for label, row in groups.items():
            st = row.get("settings", {})
            seeds = st.get("seeds") or []
            # TRPO's policy step is set by its KL bound; it ignores algo.lr (its value head steps at algo.value_lr)
            step = f"δ = {st['algo.trpo_delta']}" if st.get("algo.name") == "trpo" and st.get("algo.trpo_delta") \
                else st.get("algo.lr", "-")
            out.append(f"| {label} | {st.get('algo.name', '-')} | {step} | {_extras(st)} | "
                       f"{', '.join(map(str, seeds)) or '-'} | "
                       + " | ".join(_pm(row.get(key)) for key, _ in COMPARE_COLUMNS)
                       + " | " + " | ".join(_reached(row.get(k)) for k in reach) + " |")
        out.append("")
    return "\n".join(out)


def _extras(settings: dict[str, Any]) -> str:
    """Exploration noise and replay of successes where a group's runs set them (else "-")."""
    shown = [f"{name} {settings[key]}" for key, name in (("policy.noise", "noise"), ("algo.replay_coef", "replay"))
             if settings.get(key)]
    return ", ".join(shown) or "-"


def _reached(stat: dict[str, Any] | None) -> str:
    """Decisions until the training success first reached the threshold: mean ± std over the runs that
    did, with how many of them did ("never" when none)."""
    if not stat:
        return "-"
    if not stat.get("n"):
        return "never"
    cell = f"{stat['mean']:.0f}" if stat["n"] == 1 else f"{stat['mean']:.0f} ± {stat['std']:.0f}"
    return cell + (f" ({stat['n']} of {len(stat['values'])} runs)" if stat["n"] != len(stat["values"]) else "")


def agents(files: list[str]) -> str:
    """A coordinator with scripted vs LLM role agents (``benchmarks/llm_agents.py --out``), a block per file."""
    out = []
    for f in files:
        d = _load(f)
        out.append(f"`{d['command']}`: {d['env']} ({_options(d['options'])}), world seeds "
                   f"{d['seed']:,}-{d['seed'] + d['episodes'] - 1:,} (`{f}`)\n")
        out.append("| coordinator + role agents | " + " | ".join(label for _, label in AGENT_COLUMNS) + " |")
        out.append("|---" * (len(AGENT_COLUMNS) + 1) + "|")
        for name, row in d["rows"].items():
            out.append(f"| {name} | " + " | ".join(f"{row[key]:.2f}" if key in ("return", "seconds")
                                                    else f"{row[key]:.3f}" for key, _ in AGENT_COLUMNS) + " |")
        out.append("")
    return "\n".join(out)


def recipe(config: dict[str, Any]) -> str:
    """What a run's ``trained`` row is, read off its resolved config: ``BC``, ``PPO alone``, ``BC + PPO``,
    ``PPO from `INIT``` (a warm start given as model.init; another algorithm by its name), with the
    directive mode when it is not single."""
    algo = str(config["algo"]["name"]).upper()
    cloned = bool(config["bc"]["enabled"])
    rl = int(config["train"]["iterations"]) > 0
    init = (config.get("model") or {}).get("init")
    name = (f"{_clone(config)} + {algo}" if cloned and rl else _clone(config) if cloned
            else f"{algo} from `{init}`" if init else f"{algo} alone")
    return name + _mode(config)


def _clone(config: dict[str, Any]) -> str:
    """``BC``, or ``BC + DAgger (N rounds)`` for a run with ``bc.dagger_rounds``."""
    rounds = int(config["bc"].get("dagger_rounds") or 0)
    return f"BC + DAgger ({rounds} round{'s' * (rounds > 1)})" if rounds else "BC"


def _warm(config: dict[str, Any]) -> str:
    """What a run's ``bc`` row is: its behaviour clone, or the ``model.init`` adapter it started from."""
    init = (config.get("model") or {}).get("init")
    return _clone(config) if config["bc"]["enabled"] or not init else f"`{init}` (the warm start)"


def _mode(config: dict[str, Any]) -> str:
    team = config.get("team") or {}
    mode = team.get("directives", "single")
    hierarchical = ", hierarchical" if (team.get("hierarchy") or {}).get("enabled") else ""
    return hierarchical + ("" if mode == "single" else f", {mode.replace('_', '-')} directives")


def _baseline_mode(policy: str, config: dict[str, Any]) -> str:
    """What a baseline row's label adds for the run's mode: the zero-shot model directs in the run's
    mode (and hierarchy); the expert gives the whole-team oracle's lines in whole-team and free-text
    runs (``OraclePolicy``), and never uses the hierarchy; scripted baselines are the same everywhere."""
    if policy == "zero-shot":
        return _mode(config)
    directives = (config.get("team") or {}).get("directives", "single")
    return ", whole-team directives" if policy in ("oracle", "heuristic") and directives != "single" else ""


def world(files: list[str]) -> str:
    """One world's table from several ``teamtr sweep --json`` files (the first sets the world): the
    scripted and zero-shot baselines once (from the first file that has each; the expert and zero-shot
    rows once per directive mode, as they direct in it), then every file's ``bc``
    and ``trained`` rows, labelled by the recipe its config resolved (a sweep with the generalisation
    suite gives its ``@ heldout`` rows; the other suites are its own table's). A file whose world options differ
    from the first's says how in its label, so no row claims a setting it was not measured in."""
    loaded = [(f, _load(f)) for f in files]
    first_env = dict(loaded[0][1]["config"]["env"])
    name = first_env.pop("name")
    rows: list[tuple[str, str, dict[str, Any]]] = []  # (label, source, row)
    baselines: dict[str, tuple[str, dict[str, Any]]] = {}
    for f, d in loaded:
        env = dict(d["config"]["env"])
        if env.pop("name") != name:
            raise SystemExit(f"tables.py world: {f} is a {d['config']['env']['name']} sweep, the table's world is "
                             f"{name} (from {loaded[0][0]}); give one world's files per table.")
        differs = {k: v for k, v in env.items() if first_env.get(k) != v}
        differs.update({k: "unset (the world's default)" for k in first_env if k not in env})
        notes = [f"trained with {_options(differs).strip('`')}"] if differs else []
        offset = d["config"]["train"]["eval_seed_offset"]
        if offset != loaded[0][1]["config"]["train"]["eval_seed_offset"]:
            notes.append(f"held-out seeds from {offset:,}")
        tested = d["config"]["train"].get("eval_env") or {}
        if tested:
            notes.append(f"tested with {_options(tested).strip('`')}")
        where = f" ({'; '.join(notes)})" if notes else ""
        for label, row in d["rows"].items():
            policy, _, suite = label.partition(" @ ")  # a generalisation-suite sweep: its held-out-seeds rows
            if suite not in ("", "heldout"):
                continue
            if policy == "trained":
                rows.append((recipe(d["config"]) + where, f"`{d['command']}`", row))
            elif policy == "bc":
                rows.append((_warm(d["config"]) + _mode(d["config"]) + where, f"the `bc` row of `{d['command']}`", row))
            elif not notes:
                # the oracle and the zero-shot model direct in the run's mode (the whole-team oracle
                # directs every agent at once): one row per mode; scripted baselines are the same in every mode
                key = policy + _baseline_mode(policy, d["config"])
                baselines.setdefault(key, (f"`{d['command']}`", row))
    out = [f"{name} ({_options(first_env)}), held-out seeds from "
           f"{loaded[0][1]['config']['train']['eval_seed_offset']:,}, greedy; mean ± std over seeds "
           f"(`{'`, `'.join(files)}`)\n",
           "| policy | " + " | ".join(label for _, label in SWEEP_COLUMNS) + " | from |",
           "|---" * (len(SWEEP_COLUMNS) + 2) + "|"]
    digits = {"return": 2, "length": 1}
    table = [(policy, *baselines[policy]) for policy in baselines] + rows
    for label, source, row in table:
        cells = [_pm(row.get(key), digits.get(key, 3)) for key, _ in SWEEP_COLUMNS]
        out.append(f"| {label} | " + " | ".join(cells) + f" | {source} |")
    return "\n".join(out) + "\n"


def _soups(row: dict[str, Any], metric: str) -> str:
    """One seed: its mean ± the std over its held-out episodes (``<metric>_std``); several seeds: the mean
    ± std over the seeds' means."""
    stat = row.get(metric)
    if not stat:
        return "-"
    if len(stat["values"]) == 1 and f"{metric}_std" in row:
        return f"{stat['mean']:.2f} ± {row[f'{metric}_std']['mean']:.2f}"
    return _pm(stat, 2)


def layouts(files: list[str]) -> str:
    """A world whose final tables hold one suite per layout (Overcooked's ``env.layout`` list: rows
    ``policy @ layout=X``): one table row per layout, one column per policy, soups delivered (Overcooked's
    headline metric). The first file gives the baselines (heuristic, noop, random, zero-shot); every file
    its ``bc`` and ``trained`` columns, labelled by its recipe. Layouts a run did not train on are its
    ``layout=X unseen`` suites (leave-one-layout-out), shown in their own row."""
    loaded = [(f, _load(f)) for f in files]
    env = dict(loaded[0][1]["config"]["env"])
    name = env.pop("name")
    metric = "soups"
    columns: dict[str, tuple[str, dict[str, Any]]] = {}  # column label -> (source, {layout: row})
    for k, (f, d) in enumerate(loaded):
        for label, row in d["rows"].items():
            policy, _, suite = label.partition(" @ ")
            if not suite:
                raise SystemExit(f"tables.py layouts: {f} row {label!r} names no layout; this table is for a "
                                 "run over a list of layouts (env.layout=[...]).")
            if policy in ("trained", "bc"):
                head = recipe(d["config"]) if policy == "trained" else _warm(d["config"])
                head += f" ({k + 1})" if len(loaded) > 1 else ""
            elif k == 0:
                head = policy
            else:
                continue
            columns.setdefault(head, (f, {}))[1][suite.removeprefix("layout=")] = row
    suites = list(dict.fromkeys(s for _, rows in columns.values() for s in rows))
    counts = {head: {int(r["episodes"]["mean"]) for r in rows.values() if "episodes" in r} for head, (_, rows) in columns.items()}
    shown = {head: f"{head} ({next(iter(n))} ep.)" if len(n) == 1 else head for head, n in counts.items()}
    seeds = ", ".join(f"`{f}`: seeds {', '.join(map(str, d['seeds']))}" for f, d in loaded)
    tested = _options(loaded[0][1]["config"]["train"].get("eval_env") or {})
    out = [f"{name} ({_options(env)}; tested with {tested}), {metric} per held-out episode; "
           f"one seed: mean ± std over its episodes, several: over the seeds' means ({seeds}). "
           + " ".join(f"({k + 1}) `{d['command']}`." for k, (_, d) in enumerate(loaded)) + "\n",
           "| layout | " + " | ".join(shown[c] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for suite in suites:
        out.append(f"| {suite} | " + " | ".join(_soups(rows.get(suite, {}), metric) for _, rows in columns.values()) + " |")
    return "\n".join(out) + "\n"


KINDS: dict[str, Callable[[list[str]], str]] = {"worlds": worlds, "sweep": sweep, "compare": compare,
                                                "agents": agents, "world": world,
                                                "layouts": layouts}


def expand(patterns: str) -> list[str]:
    """Space-separated paths or globs relative to the repository, sorted per glob."""
    files: list[str] = []
    for pattern in patterns.split():
        if not (ROOT / pattern).resolve().is_relative_to(ROOT):  # an absolute path, or one through ..
            raise SystemExit(f"tables.py: {pattern} is outside the repository ({ROOT}); the tables read results "
                             "the README can point to: copy it under results/ and give that path.")
        matched = sorted(str(Path(p).relative_to(ROOT)) for p in glob.glob(str(ROOT / pattern)))
        if not matched:
            raise SystemExit(f"tables.py: {pattern!r} matches no file under {ROOT}; run the command that writes it.")
        files += matched
    return files


def regenerate(text: str) -> str:
    """``text`` with every marked block's body generated afresh."""
    def body(match: re.Match[str]) -> str:
        kind, patterns = match.group(2), match.group(3)
        if kind not in KINDS:
            raise SystemExit(f"tables.py: unknown table kind {kind!r}; known: {', '.join(KINDS)}.")
        return match.group(1) + KINDS[kind](expand(patterns)) + match.group(5)

    return BLOCK.sub(body, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", nargs="?", choices=sorted(KINDS))
    parser.add_argument("files", nargs="*")
    parser.add_argument("--update", metavar="MARKDOWN", help="regenerate every marked block of this file")
    parser.add_argument("--check", metavar="MARKDOWN", help="exit 1 when a marked block is not up to date")
    args = parser.parse_args(argv)
    if args.update or args.check:
        path = Path(args.update or args.check)
        text = path.read_text()
        fresh = regenerate(text)
        if args.check:
            if fresh != text:
                print(f"{path}: a results table is stale; run python benchmarks/tables.py --update {path}")
                return 1
            return 0
        path.write_text(fresh)
        print(f"updated {path}")
        return 0
    if not args.kind:
        parser.error("give a table kind and its files, or --update/--check MARKDOWN")
    print(KINDS[args.kind](expand(" ".join(args.files))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
