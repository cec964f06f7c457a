"""Light tuning of the local LLM role agents: behaviour cloning of one adapter per role.

The teacher is the role's scripted agent in the same world: it carries out the directive in force
with the world's planner, so an LLM agent cloned on its choices learns to combine directive + view as
it does. Collection runs teams whose ``llm`` agents are recorded (``_Recorder``: every request's
prompt, valid actions and the scripted action, which is also the action taken) while the oracle
coordinator directs them, with a share ``explore`` of random directives so that the agents also meet
invalid, odd and absent ones. Each role's adapter (``policy/roles.py``) is then trained by
cross-entropy over the valid actions, the coordinator's adapter untouched (it is inactive in these
passes and not in the optimiser).

Measured before and after: agreement (the LLM agent's greedy action == the scripted one) on held-out
views, per role, and the team success of the oracle coordinator with the untuned and the tuned agents.
Seeds: training views from ``train.eval_seed_offset // 2`` up (training range, apart from the
coordinator's stream, which is the same with or without this stage), held-out views from
``train.eval_seed_offset + 600_000``, team success on the held-out suite's seeds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from teamtr.agents.chooser import ActionRequest, Answer, role_word
from teamtr.agents.mixed import MixedTeam
from teamtr.config import Config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.policy.coordinator import CoordinatorLike
from teamtr.team import Team, TeamBatch
from teamtr.telemetry.progress import Progress

HELDOUT_SEEDS = 600_000  # held-out views start at train.eval_seed_offset + this


@dataclass(frozen=True)
class RoleDemo:
    """One scripted choice as an LLM agent sees it (a ``ChoicePromptLike``): ``label`` indexes ``options``."""

    role: str | None
    system: str
    user: str
    options: tuple[str, ...]
    label: int


class _Recorder:
    """A resolver that answers every request with the scripted agent's action and records the choice."""

    def __init__(self) -> None:
        self.demos: list[RoleDemo] = []

    def resolve(self, requests: Sequence[ActionRequest]) -> list[Answer]:
        answers = []
        for r in requests:
            if r.fallback not in r.actions:
                answers.append(Answer(None))
                continue
            label = r.actions.index(r.fallback)
            if len(r.actions) > 1:  # nothing to learn where nothing is chosen
                self.demos.append(RoleDemo(role_word(r.agent), r.system, r.prompt, tuple(r.actions), label))
            answers.append(Answer(label))
        return answers


def llm_roles(config: Config) -> list[str]:
    """The roles (role words) of the ``llm`` agents of ``config``'s world, sorted."""
    world = make(config.env.name, **config.env.options())
    kinds = MixedTeam(config.team.agents, {"llm": _Recorder(), "remote": _Recorder()})
    return sorted({role_word(name) for name in world.agents if kinds.kind(name) == "llm"})


def attach(config: Config, coordinator: CoordinatorLike) -> list[str]:
    """Give ``coordinator`` an adapter per role of the ``llm`` agents (``team.llm.role_adapters``)."""
    roles = llm_roles(config)
    coordinator.roles.add(roles, config.team.llm.role_adapters.rank, config.model.lora.target_modules, config.seed)
    return roles


def collect(config: Config, per_role: int, seed: int, what: str = "role demos",
            parallel: int = 16) -> list[RoleDemo]:
    """``per_role`` recorded scripted choices of every ``llm`` agent role, from episodes seeded
    ``seed, seed+1, ...`` directed by the oracle (a random directive on a share ``explore`` of steps)."""
    roles = llm_roles(config)
    recorder = _Recorder()
    kinds = {k: ("llm" if v == "llm" else "scripted") for k, v in config.team.agents.items()}
    mixed = MixedTeam(kinds, {"llm": recorder}, config.team.llm.role_prompts)
    rng = random.Random(seed)
    explore = config.team.llm.role_adapters.explore
    counts = dict.fromkeys(roles, 0)
    with Progress(what, per_role * len(roles), unit="choices") as progress:
        for start in range(seed, seed + 200 * parallel, parallel):
            teams = [Team(make(config.env.name, **config.env.options()), history_len=config.team.history_len,
                          make_agent=mixed) for _ in range(parallel)]
            batch = TeamBatch(teams)
            batch.reset(list(range(start, start + parallel)))
            while batch.live() and min(counts.values()) < per_role:
                batch.step([rng.randrange(len(s.candidates)) if rng.random() < explore else s.expert
                            for s in batch.states()])
                counts = {r: sum(d.role == r for d in recorder.demos) for r in roles}
                progress.update(sum(min(n, per_role) for n in counts.values()))
            if min(counts.values()) >= per_role:
                break
        else:
            short = min(counts, key=counts.__getitem__)
            raise TeamTRError(f"role {short!r} chose among several actions only {counts[short]} times in "
                              f"{200 * parallel} episodes; lower team.llm.role_adapters.demos/heldout.")
    return [d for r in roles for d in [x for x in recorder.demos if x.role == r][:per_role]]


def agreement(coordinator: CoordinatorLike, demos: Sequence[RoleDemo], tuned: bool,
              batch_size: int = 32) -> dict[str, float]:
    """Per role, the share of ``demos`` where the LLM agent's greedy action is the scripted one:
    with its role adapter (``tuned``) or with the base model (untuned); and per role and kind of
    scripted action (its first word: ``agent/move``, ``agent/drop``...), so a mean that hides one
    action the agents never get right shows it."""
    from teamtr.policy.choices import ChoiceScorer

    score = ChoiceScorer.of_coordinator(coordinator)
    hits: dict[str, list[int]] = {}
    for s in range(0, len(demos), batch_size):
        chunk = list(demos[s : s + batch_size])
        rows = score([d if tuned else replace(d, role=None) for d in chunk])
        for d, row in zip(chunk, rows):
            hit = int(max(range(len(row)), key=row.__getitem__) == d.label)
            verb = d.options[d.label].split(" ", 1)[0]
            for key in (str(d.role), f"{d.role}/{verb}"):
                hits.setdefault(key, []).append(hit)
    return {role: sum(h) / len(h) for role, h in sorted(hits.items())}


def tune(coordinator: CoordinatorLike, demos: Sequence[RoleDemo], *, epochs: int, batch_size: int, lr: float,
         seed: int = 0, log: Callable[[int, dict[str, float]], None] | None = None) -> dict[str, float]:
    """Behaviour-clone every role's adapter on its ``demos`` (cross-entropy over the valid actions);
    the last step's metrics: ``roles/loss`` and ``roles/accuracy`` (of that batch)."""
    from teamtr.policy.choices import ChoiceScorer

    if not demos:
        raise TeamTRError("role tuning got no demonstrations.")
    score = ChoiceScorer.of_coordinator(coordinator)
    g = torch.Generator().manual_seed(seed)
    steps = max(1, len(demos) // batch_size)
    metrics: dict[str, float] = {}
    roles = sorted({str(d.role) for d in demos})
    with coordinator.roles.trainable(roles) as params, Progress("role tuning", epochs * steps, unit="steps") as bar:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        for epoch in range(epochs):
            order = torch.randperm(len(demos), generator=g).tolist()
            for k in range(steps):
                batch = [demos[i] for i in order[k * batch_size : (k + 1) * batch_size]]
                rows = score.score_tensors(batch)
                logp = [torch.log_softmax(row.float(), -1)[d.label] for row, d in zip(rows, batch)]
                loss = -torch.stack(logp).mean()
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                coordinator.weights_changed()
                acc = sum(int(row.argmax() == d.label) for row, d in zip(rows, batch)) / len(batch)
                step = epoch * steps + k + 1
                metrics = {"roles/loss": loss.item(), "roles/accuracy": acc, "roles/step": step}
                if log is not None:
                    log(step, metrics)
                bar.update(step, f"loss {loss.item():.3f}  accuracy {acc:.2f}")
        opt.zero_grad(set_to_none=True)  # no stale gradient stays on the adapters
    return metrics


def team_success(config: Config, coordinator: CoordinatorLike, tuned: bool, episodes: int,
                 policy: Any = None) -> float:
    """Mean success of ``policy`` (default: the oracle coordinator) with ``config``'s team, LLM agents
    tuned or not, on the first ``episodes`` held-out seeds."""
    from teamtr.eval.evaluate import run_episodes
    from teamtr.eval.policies import OraclePolicy
    from teamtr.eval.team_agents import agent_factory

    c = config.model_copy(deep=True)
    c.team.llm.role_adapters.enabled = tuned
    offset = config.train.eval_seed_offset
    policy = policy or OraclePolicy()
    metrics = run_episodes(c.env.name, c.env.options(), policy, list(range(offset, offset + episodes)),
                           rewards=c.rewards.composer(), history_len=c.team.history_len,
                           label=f"{type(policy).__name__} + {'tuned' if tuned else 'untuned'} LLM agents",
                           make_agent=agent_factory(c, coordinator))
    return sum(m.success for m in metrics) / max(1, len(metrics))


def run_stage(config: Config, coordinator: CoordinatorLike,
              log: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, float]:
    """The whole stage on a coordinator carrying the role adapters (``attach``): collect, measure,
    tune, measure. Returns the summary: agreement before/after (mean and per role) and the oracle's
    team success with untuned/tuned agents (when ``eval_episodes`` > 0)."""
    cfg = config.team.llm.role_adapters
    offset = config.train.eval_seed_offset
    demos = collect(config, cfg.demos, offset // 2)
    heldout = collect(config, cfg.heldout, offset + HELDOUT_SEEDS, what="held-out role views")
    before = agreement(coordinator, heldout, tuned=False)
    success_before = team_success(config, coordinator, False, cfg.eval_episodes) if cfg.eval_episodes else None
    last = tune(coordinator, demos, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, seed=config.seed, log=log)
    after = agreement(coordinator, heldout, tuned=True)
    summary: dict[str, float] = {**last, "roles/agreement_before": _mean(_roles_only(before)),
                                 "roles/agreement_after": _mean(_roles_only(after)),
                                 **{f"roles/agreement_before/{tag(r)}": v for r, v in before.items()},
                                 **{f"roles/agreement_after/{tag(r)}": v for r, v in after.items()},
                                 "roles/demos": len(demos), "roles/heldout": len(heldout)}
    if success_before is not None:
        summary["roles/oracle_success_untuned"] = success_before
        summary["roles/oracle_success_tuned"] = team_success(config, coordinator, True, cfg.eval_episodes)
    if log is not None:
        log(int(last.get("roles/step", 0)), summary)
    return summary


def _roles_only(agreements: dict[str, float]) -> dict[str, float]:
    """``agreement``'s per-role entries, without the per-action ones."""
    return {k: v for k, v in agreements.items() if "/" not in k}


def _mean(values: dict[str, float]) -> float:
    return sum(values.values()) / max(1, len(values))


def tag(role: str) -> str:
    """A role as a metric-name part: ``product manager`` -> ``product_manager``."""
    return role.replace(" ", "_")
