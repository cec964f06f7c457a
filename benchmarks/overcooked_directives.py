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

Two more questions, each with its option: can a clone learn the heuristic from what it sees
(``--labels N``: the heuristic's decisions on N training episodes a layout, 200 ticks as the configs
train; how many distinct prompts, the share a lookup table of prompt -> label gets right, and how many
held-out prompts it has seen), and what does a clone say on the heuristic's own path (``--clone
CHECKPOINT``: its greedy choices, by the kind of the heuristic's label and of its own choice), and on its
own path (``--replay RUN``: the run's end-of-run episodes replayed, the heuristic labelling each state).

    python benchmarks/overcooked_directives.py [--episodes 5] [--run RUN ...] [--labels 20]
                                               [--clone CHECKPOINT ...] [--replay RUN ...] [--out FILE]

Prints Markdown tables and writes the JSON (default ``results/overcooked/directive_kinds.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

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
        path = heuristic_path(layout, range(HELD_OUT, HELD_OUT + episodes), horizon=400)
        pairs = [(s.state, s.candidates[s.expert].text) for s in path]
        rows[f"heuristic @ layout={layout}"] = {**shares(pairs), "episodes": float(episodes)}
    return rows


def _transcripts(run: Path) -> list[dict[str, Any]]:
    """A finished run's end-of-run episodes (``RUN/eval_transcripts.jsonl``), one dict each."""
    path = run / "eval_transcripts.jsonl"
    if not path.is_file():
        raise TeamTRError(f"{path} is missing: give a finished run's directory (its end-of-run table writes it).")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_rows(run: Path) -> dict[str, dict[str, float]]:
    by_policy: dict[str, list[tuple[str, str]]] = {}
    episodes: Counter[str] = Counter()
    for episode in _transcripts(run):
        name = f"{run}: {episode['policy']}"
        if not any(step.get("directive") for step in episode["steps"]):
            continue  # scripted rows without recorded directives
        episodes[name] += 1
        by_policy.setdefault(name, []).extend((s["state"], s["directive"]) for s in episode["steps"])
    return {name: {**shares(pairs), "episodes": float(episodes[name])} for name, pairs in by_policy.items()}


def overcooked_team(layout: str, horizon: int) -> Team:
    """A team in the trained configs' world: ``decision_every`` 25, compact state text, no history."""
    return Team(OvercookedWorld(layout=layout, horizon=horizon, decision_every=25, state_text="compact"), history_len=0)


def heuristic_path(layout: str, seeds: Iterable[int], horizon: int = 200) -> list[Any]:
    """The coordinator's view (``TeamState``) at every decision of the heuristic's episodes."""
    out = []
    for seed in seeds:
        team = overcooked_team(layout, horizon)
        state, done = team.reset(seed), False
        while not done:
            out.append(state)
            state, _, done, _ = team.step(state.expert)
    return out


def _prompt(state: Any) -> tuple[str, tuple[str, ...]]:
    return state.state, tuple(c.text for c in state.candidates)


def label_rows(episodes: int, heldout: int = 10) -> dict[str, dict[str, float]]:
    """Per layout: is the heuristic's label a function of the prompt the clone sees (state text and
    candidates)? ``ceiling``: the share of training decisions a prompt -> majority-label table gets
    right; ``heldout seen``: the share of held-out decisions whose prompt the table holds, and
    ``lookup accuracy`` on those."""
    rows = {}
    for layout in LAYOUTS:
        table: dict[tuple[str, tuple[str, ...]], Counter[str]] = {}
        train = heuristic_path(layout, range(episodes))
        for s in train:
            table.setdefault(_prompt(s), Counter())[s.candidates[s.expert].text] += 1
        test = heuristic_path(layout, range(HELD_OUT, HELD_OUT + heldout))
        seen = [s for s in test if _prompt(s) in table]
        hits = sum(table[_prompt(s)].most_common(1)[0][0] == s.candidates[s.expert].text for s in seen)
        rows[f"heuristic @ layout={layout}"] = {
            "decisions": float(len(train)), "prompts": float(len(table)),
            "ceiling": sum(c.most_common(1)[0][1] for c in table.values()) / len(train),
            "heldout seen": len(seen) / len(test), "lookup accuracy": hits / max(1, len(seen)),
            **shares((s.state, s.candidates[s.expert].text) for s in train)}
    return rows


def _against_labels(states: list[Any], chosen: list[int]) -> dict[str, float]:
    """Choices against the heuristic's labels: accuracy, and per kind of label the share answered with
    each kind (``new->noop``: a new directive was due and the choice said nothing new)."""
    pairs = Counter((kind(s.state, s.candidates[s.expert].text), kind(s.state, s.candidates[c].text))
                    for s, c in zip(states, chosen))
    labels = Counter(a for a, _ in pairs.elements())
    return {"decisions": float(len(states)), "accuracy": sum(c == s.expert for s, c in zip(states, chosen)) / len(states),
            **{f"{a}->{b}": n / labels[a] for (a, b), n in sorted(pairs.items())}}


def choice_rows(name: str, act: Callable[[list[Any]], list[int]], episodes: int = 1) -> dict[str, dict[str, float]]:
    """Per layout: ``act``'s choices (candidate indices) at each decision of the heuristic's held-out
    episodes (200 ticks), against the heuristic's labels (``_against_labels``)."""
    rows = {}
    for layout in LAYOUTS:
        path = heuristic_path(layout, range(HELD_OUT, HELD_OUT + episodes))
        chosen = [c for start in range(0, len(path), 32) for c in act(path[start : start + 32])]
        rows[f"{name} @ layout={layout}"] = _against_labels(path, chosen)
    return rows


def replay_rows(run: Path, horizon: int = 400) -> dict[str, dict[str, float]]:
    """Per layout, the trained coordinator's own path: its end-of-run episodes (``eval_transcripts.jsonl``)
    replayed step by step, the heuristic labelling every state it reached. Its choices against those
    labels (``_against_labels``), and whether the labels are still a function of the prompt there:
    ``prompts`` distinct, ``ambiguous`` the share of decisions in a prompt with two labels or more."""
    episodes: dict[str, list[dict[str, Any]]] = {}
    for episode in _transcripts(run):
        if episode["policy"].startswith("trained @ layout="):
            episodes.setdefault(episode["policy"].removeprefix("trained @ layout="), []).append(episode)
    rows = {}
    for layout, eps in episodes.items():
        states, chosen = [], []
        for episode in eps:
            team = overcooked_team(layout, horizon)
            state = team.reset(episode["seed"])
            for step in episode["steps"]:
                if state.state != step["state"]:
                    raise TeamTRError(f"{run}: seed {episode['seed']} on {layout} does not replay at tick "
                                      f"{step['tick']} (the run's world differs: horizon {horizon}, "
                                      "decision_every 25, compact state text, no history)")
                states.append(state)
                chosen.append(step["choice"])
                state, _, _, _ = team.step(step["choice"])
        table: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        for s in states:
            table.setdefault(_prompt(s), set()).add(s.candidates[s.expert].text)
        rows[f"{run}: trained @ layout={layout}"] = {
            **_against_labels(states, chosen), "episodes": float(len(eps)), "prompts": float(len(table)),
            "ambiguous": sum(len(table[_prompt(s)]) > 1 for s in states) / len(states)}
    return rows


def clone_rows(checkpoint: str, episodes: int = 1) -> dict[str, dict[str, float]]:
    """``choice_rows`` of a checkpoint's greedy policy."""
    from teamtr.serve import load_coordinator

    coordinator, _, _ = load_coordinator(checkpoint, None, [])
    return choice_rows(checkpoint, lambda states: list(coordinator.act(states, greedy=True).choices), episodes)


def _table(title: str, rows: dict[str, dict[str, float]], columns: Iterable[str]) -> None:
    columns = list(columns)
    print(f"\n{title}\n\n| row | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.3f}" if c in row else "-" for c in columns) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=5, help="heuristic episodes per layout")
    parser.add_argument("--run", nargs="*", default=[], help="finished runs whose end-of-run tables to read")
    parser.add_argument("--labels", type=int, default=0, help="training episodes a layout for the label analysis")
    parser.add_argument("--clone", nargs="*", default=[], help="checkpoints to score on the heuristic's path")
    parser.add_argument("--replay", nargs="*", default=[], help="finished runs whose trained episodes to replay "
                        "against the heuristic's labels")
    parser.add_argument("--out", default="results/overcooked/directive_kinds.json")
    args = parser.parse_args(argv)
    rows = heuristic_rows(args.episodes)
    for run in args.run:
        rows.update(run_rows(Path(run)))
    for row in rows.values():
        row["decisions an episode"] = row["decisions"] / row["episodes"]
    _table("What each decision asks (400 ticks)", rows, ["decisions an episode", *KINDS])
    labels = label_rows(args.labels) if args.labels else {}
    if labels:
        _table(f"The heuristic's labels against its prompts ({args.labels} episodes a layout, 200 ticks)", labels,
               ["decisions", "prompts", "ceiling", "heldout seen", "lookup accuracy", *KINDS])
    clones: dict[str, dict[str, float]] = {}
    for checkpoint in args.clone:
        clones.update(clone_rows(checkpoint))
    if clones:
        _table("A clone's greedy choices on the heuristic's path (a held-out episode a layout, 200 ticks)", clones,
               ["decisions", "accuracy", *(f"{a}->{b}" for a in KINDS if a != "in force" for b in KINDS)])
    replays: dict[str, dict[str, float]] = {}
    for run in args.replay:
        replays.update(replay_rows(Path(run)))
    if replays:
        _table("The trained coordinator's own path against the heuristic's labels (its end-of-run episodes, 400 ticks)",
               replays, ["decisions", "prompts", "ambiguous", "accuracy",
                         *(f"{a}->{b}" for a in KINDS if a != "in force" for b in KINDS)])
    world = {"layout": list(LAYOUTS), "decision_every": 25, "state_text": "compact", "history_len": 0}
    print(f"overcooked {world}; kinds: horizon 400, held-out seeds from {HELD_OUT}; labels: horizon 200, "
          f"training seeds from 0; clones: horizon 200, held-out seeds from {HELD_OUT}; replays: horizon 400, "
          "the runs' own episodes")
    print(machine_line())
    write_json(args.out, {"machine": machine(), "world": {**world, "horizon": 400, "seeds_from": HELD_OUT},
                          "runs": args.run, "rows": rows,
                          "labels": {"world": {**world, "horizon": 200, "seeds_from": 0, "heldout_from": HELD_OUT},
                                     "episodes": args.labels, "rows": labels},
                          "clones": {"world": {**world, "horizon": 200, "seeds_from": HELD_OUT},
                                     "checkpoints": args.clone, "rows": clones},
                          "replays": {"world": {**world, "horizon": 400}, "runs": args.replay, "rows": replays}})
    print(f"wrote {args.out}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
