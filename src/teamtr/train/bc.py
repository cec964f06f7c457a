"""Behaviour-cloning warm-up: cross-entropy over candidates on demonstrations.

Demonstrations come from the world's oracle (``expert_directive``) or from trajectory files in the
trainer's own transcript format (one JSON object per episode with ``task`` and ``steps``: each step
``state``, ``history``, ``candidates`` and ``choice``), so real team logs can be cloned too (the
seed's offline + online). With ``explore`` > 0 the collecting episodes take a random candidate on
that share of steps while still labelling each state with the expert's choice, so the clone also sees
states off the expert's path (DAgger-style labels; Ross et al. 2011). DAgger proper
(``learner_demos``, ``bc.dagger_rounds``): after a first clone, the clone itself acts (greedily) and
the oracle labels every state it reaches; the union of all demonstrations is cloned again, round after
round, so the clone learns to recover from its own mistakes, not only the expert's random slips.

In whole-team mode (``mode="whole_team"``) the demonstrations come from the whole-team oracle
(``TeamState.expert_lines``: every agent with something new to do gets its line in the same tick, and
the collecting episodes follow it) and a demonstration is cloned as the whole-team output of those
lines, "carry on" on every other line; the loss is that output's negative log-probability under the
state's grammar (the sum over its tokens, the quantity token-level PPO then moves). A demonstration
without lines (collected in single mode) is cloned as its one labelled directive with every other line
carrying on. A clone of single decisions never sees "carry on": decoded
whole-team, it repeated its one learned choice on every line (escape-room, README).

In free-text mode (``mode="free_text"``) the same demonstrations are cloned as text: the new lines of
that whole-team output, one per line (a no-op as the first agent's carry-on line: a text that says
nothing is invalid, ``policy.grammar.parse_free_text``), followed by the end marker, and the loss is
that text's negative log-probability over the whole vocabulary (``policy.free_text.score_texts``,
the distribution free-text PPO samples from). A candidate-scoring clone never learns to *write* its
directives: decoded freely it wrote "Tick 1 of 16" (README, free text).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from teamtr.core import NOOP, TeamTRError
from teamtr.hierarchy import GoalSchedule, goal_state
from teamtr.policy.coordinator import CoordinatorLike
from teamtr.policy.prompts import Decision
from teamtr.rl.losses import imitation_nll, masked_log_softmax
from teamtr.rl.schedules import warmup_cosine
from teamtr.team import Team, TeamBatch, TeamState
from teamtr.telemetry.progress import Progress


@dataclass(frozen=True)
class Demo:
    """One labelled decision (a ``DecisionLike`` for the coordinator)."""

    task: str
    state: str
    history: tuple[str, ...]
    candidates: tuple[str, ...]
    label: int
    weight: float = 1.0
    #: each candidate's target agent (None: a team goal, an allocation or the no-op), for whole-team
    #: cloning; empty for demonstrations read from files without them (single mode only)
    targets: tuple[str | None, ...] = ()
    #: the whole-team oracle's lines (candidate indices, at most one per agent; empty: every line
    #: carries on), for whole-team cloning; None: the demonstration is its one ``label``
    lines: tuple[int, ...] | None = None
    #: the phase goal in force (a hierarchical coordinator's tactical level reads it in its prompt)
    goal: str = ""


@dataclass(frozen=True)
class _Candidate:
    text: str
    target: str | None


def whole_team_view(demo: Demo) -> Decision:
    """``demo`` as a ``Decision`` whose candidates carry their targets (what ``team_grammar`` reads)."""
    if len(demo.targets) != len(demo.candidates):
        raise TeamTRError("Whole-team behaviour cloning needs each candidate's target agent; demonstrations from "
                          "bc.files carry none: clone them in single mode (team.directives=single), or use "
                          "oracle demonstrations (bc.demos).")
    return Decision(demo.task, demo.state, demo.history,
                    tuple(_Candidate(t, a) for t, a in zip(demo.candidates, demo.targets)))  # type: ignore[arg-type]


def expressible(demo: Demo) -> bool:
    """Whether a whole-team output can carry out ``demo.label``: a directive to one agent, or the no-op
    (every line carries on). A team goal or an allocation ("pair X with Y", target ``a+b``) has no line
    in this mode (``policy.whole_team``), so its demonstration cannot be cloned here. The whole-team
    oracle's ``lines`` always can."""
    if demo.lines is not None:
        return True
    target = demo.targets[demo.label]
    return (target is not None and "+" not in target) or demo.candidates[demo.label] == NOOP.text


def whole_team_label(demo: Demo, sources: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The option per agent line that carries out ``demo.lines`` (else ``demo.label``, which must be
    ``expressible``): each line's agent takes its directive (or the option with the same text), every
    other line carries on (its last option); the no-op is every line carrying on."""
    wanted = demo.lines if demo.lines is not None else (demo.label,)
    texts = {demo.candidates[k] for k in wanted if demo.candidates[k] != NOOP.text}
    choice = []
    for options in sources:
        pick = len(options) - 1
        for j, k in enumerate(options[:-1]):
            if k in wanted or demo.candidates[k] in texts:
                pick = j
                break
        choice.append(pick)
    return tuple(choice)


def expert_demos(make_team: Callable[[], Team], n: int, seed: int, explore: float = 0.0,
                 parallel: int = 16, what: str = "demo collection", mode: str = "single",
                 schedule: GoalSchedule | None = None, goals: list[Demo] | None = None) -> list[Demo]:
    """Collect ``n`` oracle-labelled decisions from episodes seeded ``seed, seed+1, ...`` (``what``:
    the progress phase's name). ``mode="whole_team"``: each carries the whole-team oracle's lines, and
    the episodes follow them (off the expert's path: one random candidate, as in single mode).

    ``schedule`` (a hierarchical coordinator's, ``team.hierarchy``): whenever a team's goal is due the
    oracle's goal (``expert_goal``) is put in force, and the decision is appended to ``goals`` as a
    strategic demonstration (the goals as candidates, ``hierarchy.goal_state``); every demonstration
    returned carries the goal in force, as the tactical level's prompt does."""
    if mode not in ("single", "whole_team"):
        raise TeamTRError(f"expert_demos: mode {mode!r} is not single or whole_team.")
    if schedule is not None and goals is None:
        raise TeamTRError("expert_demos: a goal schedule needs a list to put the strategic demonstrations in (goals).")
    with Progress(what, n, unit="decisions") as progress:
        return _expert_demos(make_team, n, seed, explore, parallel, progress, mode == "whole_team",
                             (schedule, goals) if schedule is not None else None)


def learner_demos(coordinator: CoordinatorLike, make_team: Callable[[], Team], n: int, seed: int,
                  explore: float = 0.0, parallel: int = 16, what: str = "DAgger collection",
                  schedule: GoalSchedule | None = None) -> tuple[list[Demo], float]:
    """DAgger's collection (Ross et al. 2011): ``n`` decisions from episodes seeded ``seed, seed+1, ...``
    in which the coordinator acts greedily (a random candidate on an ``explore`` share of steps, as in
    ``expert_demos``) and the oracle labels every state reached. Returns the demonstrations and the
    agreement: the share of them where the coordinator's greedy choice was the oracle's. Single mode
    (one directive per decision); a hierarchical team's goals are the oracle's, as in ``expert_demos``."""
    picks: list[tuple[int, int]] = []  # (learner's choice, oracle's label) per state, in demo order

    def act(states: list[TeamState]) -> list[int]:
        with torch.no_grad():
            chosen = coordinator.act(states, greedy=True).choices
        picks.extend((c, s.expert) for c, s in zip(chosen, states))
        return chosen

    goals: list[Demo] = []
    with Progress(what, n, unit="decisions") as progress:
        demos = _expert_demos(make_team, n, seed, explore, parallel, progress, False,
                              (schedule, goals) if schedule is not None else None, act=act)
    agreement = sum(c == e for c, e in picks[:n]) / max(1, min(n, len(picks)))
    return demos, agreement


def _demo(s: TeamState, lines: tuple[int, ...] | None = None) -> Demo:
    return Demo(s.task, s.state, tuple(s.history), tuple(c.text for c in s.candidates), s.expert,
                targets=tuple(getattr(c, "target", None) for c in s.candidates), lines=lines, goal=s.goal)


def _oracle_goals(batch: TeamBatch, schedule: GoalSchedule, goals: list[Demo]) -> None:
    """Every live team whose goal is due gets the oracle's; each such choice joins ``goals``."""
    for k in batch.live():
        team = batch.teams[k]
        if schedule.due(team):
            state = goal_state(team)
            goals.append(_demo(state))
            team.set_goal(state.candidates[state.expert])


def _expert_demos(make_team: Callable[[], Team], n: int, seed: int, explore: float, parallel: int,
                  progress: Progress, whole_team: bool,
                  hierarchy: tuple[GoalSchedule, list[Demo]] | None,
                  act: Callable[[list[TeamState]], list[int]] | None = None) -> list[Demo]:
    """The collection loop; ``act`` (single mode): who acts on the path instead of the oracle (the
    oracle still labels every state). The random draws are the same with and without it."""
    rng = random.Random(seed)
    demos: list[Demo] = []
    next_seed = seed
    while len(demos) < n:
        teams = [make_team() for _ in range(parallel)]
        batch = TeamBatch(teams)
        batch.reset(list(range(next_seed, next_seed + parallel)))
        next_seed += parallel
        while batch.live() and len(demos) < n:
            if hierarchy is not None:
                _oracle_goals(batch, *hierarchy)
            states = batch.states()
            acted = act(states) if act is not None else None
            choices: list[int | list[int]] = []
            for i, s in enumerate(states):
                demos.append(_demo(s, s.expert_lines if whole_team else None))
                off = explore > 0 and rng.random() < explore
                on_path = acted[i] if acted is not None else list(s.expert_lines) if whole_team else s.expert
                choices.append(rng.randrange(len(s.candidates)) if off else on_path)
            batch.step(choices)
            progress.update(min(len(demos), n))
    return demos[:n]


def file_demos(paths: Sequence[str | Path], success_weighted: bool = False) -> list[Demo]:
    """Decisions from transcript JSONL files; with ``success_weighted`` a successful episode's
    decisions weigh 4x (prioritised replay of successful trajectories)."""
    demos: list[Demo] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise TeamTRError(f"bc.files: {p} does not exist.")
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                ep = json.loads(line)
                weight = 4.0 if success_weighted and ep.get("success") else 1.0
                for step in ep["steps"]:
                    demos.append(Demo(ep["task"], step["state"], tuple(step.get("history", ())),
                                      tuple(step["candidates"]), int(step["choice"]), weight))
            except (KeyError, ValueError, TypeError) as err:
                raise TeamTRError(
                    f"{p}:{n} is not a transcript line (needs task and steps with state, candidates, "
                    f"choice): {err}"
                ) from None
    return demos


def says_nothing_new(demo: Demo) -> bool:
    """A demonstration labelled the no-op (whole-team: with no line, every agent carries on)."""
    if demo.lines is not None:
        return not demo.lines
    return demo.candidates[demo.label] == NOOP.text


def sampling_weights(demos: Sequence[Demo], noop_weight: float = 1.0) -> torch.Tensor:
    """Each demonstration's chance to be drawn into a batch: its own ``weight``, times ``noop_weight``
    for one that says nothing new (``bc.noop_weight``)."""
    return torch.tensor([d.weight * (noop_weight if says_nothing_new(d) else 1.0) for d in demos])


def behaviour_clone(coordinator: CoordinatorLike, demos: Sequence[Demo], *, epochs: int, batch_size: int, lr: float,
                    seed: int = 0, schedule: str = "constant", log: Callable[[int, dict[str, float]], None] | None = None,
                    heldout: Sequence[Demo] = (), mode: str = "single", steps: int | None = None,
                    what: str = "behaviour cloning", noop_weight: float = 1.0) -> dict[str, float]:
    """Train the coordinator's adapter to put its probability on each demo's label (``mode``:
    ``single``, over the candidates; ``whole_team``, on the whole-team output that carries it out).
    ``steps``: the number of optimiser steps (default ``epochs`` passes over ``demos``); ``what``: the
    progress phase's name; ``noop_weight``: how much more or less often a no-op demonstration is drawn
    (``sampling_weights``; docs/overcooked.md, "What the clones learned").

    ``schedule``: ``constant`` (``lr`` throughout) or ``cosine`` (linear warmup over the first tenth of
    the steps, then cosine decay to 0 at the last). Returns the last step's metrics: ``bc/loss``,
    ``bc/accuracy``, ``bc/lr`` and ``bc/heldout_accuracy``.
    """
    if schedule not in ("constant", "cosine"):
        raise TeamTRError(f"bc.schedule: {schedule!r} is not a schedule; use constant or cosine.")
    if not demos:
        raise TeamTRError("Behaviour cloning got no demonstrations (bc.demos = 0 and no bc.files).")
    if not noop_weight > 0:
        raise TeamTRError(f"bc.noop_weight = {noop_weight!r}: a sampling weight must be > 0 (1 draws no-op "
                          "demonstrations as often as the others).")
    if mode not in ("single", "whole_team", "free_text"):
        raise TeamTRError(f"Behaviour cloning in {mode!r} mode is not supported: clone in single, whole_team or "
                          "free_text mode.")
    if mode != "single":
        demos, heldout = _whole_team_demos(demos), _whole_team_demos(heldout) if heldout else heldout
    params = [p for g in coordinator.policy_param_groups() for p in g["params"]]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    weights = sampling_weights(demos, noop_weight)
    total = epochs * max(1, len(demos) // batch_size) if steps is None else steps
    if total < 1:
        raise TeamTRError(f"Behaviour cloning for {total} steps: set bc.epochs (and the step count) to at least 1.")
    warmup = max(1, total // 10)
    metrics: dict[str, float] = {}
    with Progress(what, total, unit="steps") as progress:
        for step in range(total):
            idx = torch.multinomial(weights, batch_size, replacement=len(demos) < batch_size, generator=g)
            batch = [demos[int(i)] for i in idx]
            if mode == "whole_team":
                loss, acc = _whole_team_step(coordinator, batch)
            elif mode == "free_text":
                loss, acc = _free_text_step(coordinator, batch)
            else:
                loss, acc = _single_step(coordinator, batch)
            step_lr = lr * (warmup_cosine(step, warmup, total) if schedule == "cosine" else 1.0)
            for group in opt.param_groups:
                group["lr"] = step_lr
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            coordinator.after_update()
            metrics = {"bc/loss": loss.item(), "bc/accuracy": acc, "bc/lr": step_lr, "bc/step": step + 1}
            if heldout and (step + 1 == total or (step + 1) % max(1, total // 4) == 0):
                metrics["bc/heldout_accuracy"] = accuracy(coordinator, heldout, mode=mode)
            if log is not None:
                log(step + 1, metrics)
            progress.update(step + 1, f"loss {loss.item():.3f}  accuracy {acc:.2f}")
    return metrics


def _single_step(coordinator: CoordinatorLike, batch: Sequence[Demo]) -> tuple[torch.Tensor, float]:
    """The cross-entropy over each demo's candidates and the share the argmax gets right."""
    handles = coordinator.remember(batch)
    scores, _ = coordinator.evaluate(handles)
    mask = coordinator.stored_mask(handles).to(scores.device)
    logp = masked_log_softmax(scores, mask, fill=float("-inf"))  # argmax never picks padding
    labels = torch.tensor([d.label for d in batch], device=scores.device)
    return imitation_nll(logp, labels), float((logp.argmax(-1) == labels).float().mean())


def _whole_team_demos(demos: Sequence[Demo]) -> list[Demo]:
    """The demonstrations whole-team (and free-text) cloning can use (``expressible``); every one must
    carry its candidates' targets, and some must direct a single agent (checked before the first step)."""
    for d in demos:
        whole_team_view(d)
    kept = [d for d in demos if expressible(d)]
    if not any(d.lines if d.lines is not None else d.targets[d.label] is not None for d in kept):
        raise TeamTRError(f"Whole-team behaviour cloning: none of the {len(demos)} demonstrations directs a single "
                          "agent (goals and allocations have no line in whole-team mode); clone in single mode "
                          "(team.directives=single) or start from a curriculum stage in single mode.")
    return kept


def _whole_team_targets(coordinator: CoordinatorLike, batch: Sequence[Demo]) -> tuple[list, list[tuple[int, ...]], list]:
    """The grammar decisions of ``batch``, the target option per line of each, and its token ids."""
    from teamtr.policy.whole_team import grammar_decisions

    views = [whole_team_view(d) for d in batch]
    decisions, sources = grammar_decisions(coordinator, views)  # type: ignore[arg-type]
    choices = [whole_team_label(d, src) for d, src in zip(batch, sources)]
    tokens = [gd.grammar.output(c) for (_, gd), c in zip(decisions, choices)]
    return decisions, choices, tokens


def _whole_team_step(coordinator: CoordinatorLike, batch: Sequence[Demo]) -> tuple[torch.Tensor, float]:
    """The mean negative log-probability of each demonstration's whole-team output, and the share of
    them greedy decoding would write (every branching token the argmax)."""
    from teamtr.policy.whole_team import score_whole_team

    decisions, _, tokens = _whole_team_targets(coordinator, batch)
    scores, _ = score_whole_team(coordinator, decisions, tokens)  # type: ignore[arg-type]
    loss = -scores.total.mean()  # demonstrations were drawn by weight (behaviour_clone): no weighting again
    argmax = scores.branch_logp.argmax(-1) == scores.branch_choice
    wrong = torch.zeros(len(batch), dtype=torch.bool, device=argmax.device)
    if len(argmax):
        wrong = wrong.index_put((scores.branch_index[:, 0],), ~argmax, accumulate=True)
    return loss, float((~wrong).float().mean())


def free_text_target(demo: Demo) -> str:
    """The text free-text cloning teaches for ``demo``: the new lines of its whole-team output
    (``whole_team_label``), one per line; the no-op as the first agent's carry-on line."""
    from teamtr.policy.whole_team import team_grammar

    grammar, sources = team_grammar(whole_team_view(demo))
    choice = whole_team_label(demo, sources)
    lines = [grammar.options[a][o] for a, o in enumerate(choice) if sources[a][o] >= 0]
    return "\n".join(lines) or grammar.options[0][-1]


def _free_text_step(coordinator: CoordinatorLike, batch: Sequence[Demo]) -> tuple[torch.Tensor, float]:
    """The mean negative log-probability of each demonstration's target text (``free_text_target``,
    then the end marker) over the whole vocabulary, and the share of them greedy decoding would write
    (every token the argmax given the ones before: exactly what greedy decoding does)."""
    from teamtr.policy.decoding import fold_prefixes
    from teamtr.policy.free_text import score_texts

    enc = coordinator.encode(batch)  # type: ignore[attr-defined]
    prefix, dynamics = fold_prefixes([p for p, _ in enc], [tuple(e.dynamic) for _, e in enc])
    end = tuple(coordinator.end_ids)  # type: ignore[attr-defined]
    outputs = [tuple(ids) + end for ids in coordinator.tokens([free_text_target(d) for d in batch])]  # type: ignore[attr-defined]
    scores = score_texts(coordinator.backbone.model, prefix, dynamics, outputs,  # type: ignore[attr-defined]
                         temperature=coordinator.temperature)  # type: ignore[attr-defined]
    assert scores.full is not None
    ids = torch.zeros_like(scores.mask, dtype=torch.long)
    for b, o in enumerate(outputs):
        ids[b, : len(o)] = torch.tensor(o, device=ids.device)
    hit = ((scores.full.argmax(-1) == ids) | ~scores.mask).all(-1)
    return -scores.total.mean(), float(hit.float().mean())


@torch.no_grad()
def accuracy(coordinator: CoordinatorLike, demos: Sequence[Demo], batch_size: int = 32, mode: str = "single") -> float:
    """Share of ``demos`` whose label the greedy policy picks (whole-team mode: whose whole-team output
    it writes; free-text mode: whose target text it writes)."""
    hits = 0
    for s in range(0, len(demos), batch_size):
        chunk = list(demos[s : s + batch_size])
        if mode == "free_text":
            hits += round(_free_text_step(coordinator, chunk)[1] * len(chunk))
        elif mode == "whole_team":
            from teamtr.policy.whole_team import act_whole_team

            _, choices, tokens = _whole_team_targets(coordinator, chunk)
            out = act_whole_team(coordinator, [whole_team_view(d) for d in chunk], greedy=True)  # type: ignore[arg-type]
            hits += sum(int(tuple(o) == tuple(t)) for o, t in zip(out.tokens, tokens))
        else:
            out = coordinator.act(chunk, greedy=True)
            hits += sum(int(c == d.label) for c, d in zip(out.choices, chunk))
    return hits / max(1, len(demos))
