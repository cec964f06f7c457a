"""Training a hierarchical coordinator (``team.hierarchy``): the strategic level's stream and update.

Each level's decisions form their own rollout. The tactical level's is the ordinary one (one row per
tactical decision, the team reward of that decision). The strategic level's has one row per goal
choice; its reward is the team reward accumulated (summed) over the tactical decisions the goal was in
force, and it ends where the episode ends. Each level's advantages are GAE over its own decision
times (``Rollout.compute_advantages``), with its own value head, and each level's adapter is stepped
by its own algorithm (own optimiser, schedules and KL controller) on its own loss:
``team.hierarchy.training`` ``joint`` updates both every iteration, ``alternate`` the tactical level
on odd iterations and the strategic one on even ones. Goals are chosen by the same exact candidate
scorer as directives (``eval.policies.assign_goals``), sampling from the collector's generator, so a
resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from teamtr.config import Config
from teamtr.eval.policies import assign_goals
from teamtr.hierarchy import GoalSchedule, goal_state
from teamtr.policy.coordinator import CoordinatorLike
from teamtr.policy.levels import use_level
from teamtr.rl import AlgoConfig, Algorithm, Rollout, make_algorithm
from teamtr.team import TeamState
from teamtr.train.resume import load_algo_state

Reference = Callable[[Sequence[TeamState], torch.Tensor], torch.Tensor]


def levels_trained(training: str, iteration: int) -> tuple[str, ...]:
    """The levels updated at ``iteration`` (1-based): both (joint), or alternately tactical (odd) and
    strategic (even)."""
    if training == "joint":
        return ("strategic", "tactical")
    return ("tactical",) if iteration % 2 else ("strategic",)


def updates_per_level(config: Config, iterations: int | None = None) -> int:
    """How many updates each level's schedules (LR warmup + cosine, entropy decay) span over
    ``iterations`` (default: the run's ``train.iterations``)."""
    n = max(1, config.train.iterations if iterations is None else iterations)
    h = config.team.hierarchy
    return math.ceil(n / 2) if h.enabled and h.training == "alternate" else n


@dataclass
class _Pending:
    """A strategic decision whose reward is still accumulating: its rollout fields but the reward."""

    row: dict[str, Any]
    reward: float = 0.0


class Hierarchy:
    """The strategic level of a training run: acts in collection (``plan``/``after``), owns the
    strategic rollout and algorithm, updates and checkpoints them."""

    def __init__(self, config: Config, coordinator: CoordinatorLike, reference: Reference) -> None:
        h = config.team.hierarchy
        self.schedule = GoalSchedule.from_config(h)
        self.training = h.training
        self.coordinator, self.reference = coordinator, reference
        self.algo: Algorithm | None = None
        self.rollout = Rollout()
        self._pending: dict[int, _Pending] = {}
        self._counts: dict[int, list[int]] = {}  # episode id -> [strategic decisions, goal switches]

    def start(self, name: str, config: AlgoConfig) -> None:
        """Build the strategic level's algorithm over its adapter and value head."""
        with use_level(self.coordinator, "strategic"):
            self.algo = make_algorithm(name, self.coordinator.policy_param_groups(),
                                       self.coordinator.value_parameters(), config)

    # ------------------------------------------------------------------ collection
    def plan(self, live: Sequence[Any], generator: torch.Generator) -> None:
        """Before a tick's tactical decisions: sample a goal for every live episode (``_Episode``:
        ``team``, ``id``, ``seed``) whose goal is due, and open its strategic row."""
        teams = [ep.team for ep in live]
        before = [team.goal for team in teams]
        due, states, out = assign_goals(self.coordinator, teams, self.schedule, greedy=False,
                                        generator=generator, keep=True)
        if not due:
            return
        ref = self.reference(states, out.logp)
        for j, k in enumerate(due):
            ep, c = live[k], len(states[j].candidates)
            self._close(ep.id, terminated=False, truncated=False)
            counts = self._counts.setdefault(ep.id, [0, 0])
            counts[0] += 1
            counts[1] += before[k] is not None and before[k] != teams[k].goal
            self._pending[ep.id] = _Pending(dict(
                logp=out.logp[j, :c], ref_logp=ref[j, :c], mask=out.mask[j, :c], actions=out.choices[j],
                values=out.values[j], episode_id=ep.id, handles=out.handles[j], group_id=ep.seed))

    def after(self, live: Sequence[Any], results: Sequence[tuple[TeamState, float, bool, dict[str, Any]]]) -> None:
        """After the tick: each episode's team reward goes to its open strategic row; an ended
        episode closes it (a truncated one bootstraps from the strategic value of its last state)."""
        cut = [k for k, r in enumerate(results) if r[3]["truncated"]]
        boot = {}
        if cut:
            with use_level(self.coordinator, "strategic"):
                values = self.coordinator.act([goal_state(live[k].team) for k in cut]).values
            boot = {k: float(v) for k, v in zip(cut, values)}
        for k, (ep, (_, reward, done, info)) in enumerate(zip(live, results)):
            self._pending[ep.id].reward += float(reward)
            if done:
                self._close(ep.id, terminated=info["terminated"], truncated=info["truncated"],
                            bootstrap=boot.get(k, 0.0))

    def _close(self, episode: int, terminated: bool, truncated: bool, bootstrap: float = 0.0) -> None:
        pending = self._pending.pop(episode, None)
        if pending is not None:
            self.rollout.append(**pending.row, rewards=pending.reward, terminated=terminated,
                                truncated=truncated, bootstrap_values=bootstrap)

    def episode_row(self, episode: int) -> dict[str, float]:
        """The episode's strategic decisions and goal switches (a new goal unlike the one in force)."""
        decisions, switches = self._counts.pop(episode, [0, 0])
        return {"strategic_decisions": float(decisions), "goal_switches": float(switches)}

    # ------------------------------------------------------------------ learning
    def update(self, trainer: Any, rollout: Rollout, iteration: int) -> dict[str, float]:
        """This iteration's updates (``levels_trained``): the strategic level's metrics prefixed
        ``strategic/``, the tactical level's under the usual names (``trainer.update``)."""
        assert self.algo is not None, "update() before start()"
        strategic, self.rollout = self.rollout, Rollout()
        levels = levels_trained(self.training, iteration)
        metrics: dict[str, float] = {"hierarchy/strategic_updated": float("strategic" in levels),
                                     "hierarchy/tactical_updated": float("tactical" in levels),
                                     "strategic/perf/decisions": float(len(strategic))}
        try:
            if "strategic" in levels and len(strategic):
                c = trainer.algo_config
                strategic.compute_advantages(c.gamma, c.lam, c.normalize_advantages,
                                             estimator=self.algo.advantage_estimator)
                with use_level(self.coordinator, "strategic"):
                    m = self.algo.update(lambda mb: self.coordinator.evaluate(mb.handles), strategic)
                if trainer._skips_reference():
                    m["policy/kl_ref_new"] = float("nan")  # not measured: no reference pass was run
                metrics.update({f"strategic/{k}": v for k, v in m.items()})
        finally:
            if "tactical" not in levels:
                self.coordinator.after_update()  # trainer.update does it otherwise
        if "tactical" in levels:
            metrics.update(trainer.update(rollout))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        assert self.algo is not None, "state_dict() before start()"
        return {"algo": self.algo.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        assert self.algo is not None, "load_state_dict() before start()"
        load_algo_state(self.algo, state["algo"])
