"""The ``ray`` rollout backend: Ray actors hold the live teams; the learner scores them.

``rollout.workers`` actors (``TeamWorker``) each hold a contiguous slice of a batch's teams (worlds,
role agents, reward terms). Every round the learner takes the replies of the workers that have
answered, scores all their live states in ONE coordinator call (the coordinator stays on the learner's
device), and sends each worker its choices; the worker steps its teams and answers with the results.

- ``rollout.lockstep: true`` (the default): a round waits for every worker, so the coordinator sees the
  same states in the same order as ``inline`` and the same seeds give the same numbers.
- ``rollout.lockstep: false``: a round scores whichever workers have answered (at least one), so a slow
  world or role agent stalls only its own teams. Staleness is bounded by the iteration: the weights
  change only between iterations, so every decision is scored by the current policy, and a late worker's
  states join the next round (never dropped); the iteration ends when every episode has.
- A worker that dies is replaced: its episodes restart from their seeds (the lost attempts' decisions
  are dropped from the rollout) and ``rollout/workers_lost``, ``rollout/episodes_restarted`` count it.

Not built: the policy-replica mode (a coordinator copy in each actor, synced after each update).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable


from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.rewards.terms import RewardComposer
from teamtr.rl import Rollout
from teamtr.team import Team, TeamState
from teamtr.telemetry.metrics import EpisodeTracker
from teamtr.telemetry.progress import Progress
from teamtr.train.collect import Collector

Result = tuple[TeamState, float, bool, dict[str, Any]]


@dataclass(frozen=True)
class TeamRecipe:
    """What a worker needs to build a team (picklable): the world, its options, rewards, history."""

    env: str
    options: dict[str, Any]
    rewards: RewardComposer
    history_len: int
    make_agent: Any = None  # role agents other than scripted ones stay with the learner (refused with ray)

    def __call__(self) -> Team:
        return Team(make(self.env, **self.options), rewards=self.rewards, history_len=self.history_len,
                    make_agent=self.make_agent)


class TeamWorker:
    """A Ray actor's body: teams keyed by episode id."""

    def __init__(self) -> None:
        self.teams: dict[int, Team] = {}

    def reset(self, recipe: TeamRecipe, episodes: list[tuple[int, int]]) -> list[tuple[int, TeamState, str, int]]:
        """Fresh teams for ``(episode id, seed)`` pairs: (id, first state, task, agent count) each."""
        out = []
        for eid, seed in episodes:
            team = self.teams[eid] = recipe()
            state = team.reset(seed)
            out.append((eid, state, team.world.task, len(team.world.agents)))
        return out

    def step(self, choices: dict[int, int]) -> list[tuple[int, Result]]:
        """Step each team ``id`` with ``choices[id]``; finished teams are let go."""
        out = []
        for eid, choice in choices.items():
            result = self.teams[eid].step(choice)
            if result[2]:
                del self.teams[eid]
            out.append((eid, result))
        return out


@dataclass
class _Episode:
    """The learner's side of an episode a worker runs."""

    seed: int
    id: int
    worker: int
    tracker: EpisodeTracker | None = None
    task: str = ""
    state: TeamState | None = None  # the state awaiting (or being) scored; None once finished
    attempt: int = 0
    done: bool = False
    swaps: int = 0  # the Ray backend runs no exploration noise (make_collector refuses it): stays 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: (ActOutput, reference log-probs, row, (round, row)) of the decision awaiting its result
    scored: tuple[Any, Any, int, tuple[int, int]] | None = None


def ray_module() -> Any:
    if importlib.util.find_spec("ray") is None:
        raise TeamTRError("rollout.backend = ray but Ray is not installed: pip install 'teamtr[ray]' "
                          "(or --set rollout.backend=inline).")
    import ray

    return ray


class RayCollector(Collector):
    """``Collector`` whose teams step in ``workers`` Ray actors (see the module docstring).
    ``recipe()`` gives the team recipe of the moment (a curriculum may change it between batches)."""

    def __init__(self, *args: Any, recipe: Callable[[], TeamRecipe], workers: int, lockstep: bool = True,
                 address: str | None = None, on_round: Callable[[int, list[Any]], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ray = ray_module()
        if not self.ray.is_initialized():
            self.ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.recipe, self.lockstep, self.on_round = recipe, lockstep, on_round
        self.actor_class = self.ray.remote(num_cpus=1, max_restarts=0)(TeamWorker)
        self.workers = [self.actor_class.remote() for _ in range(workers)]
        self._scored = 0  # scoring rounds so far: results are recorded in scoring order

    def collect(self, episodes: int, parallel: int) -> tuple[Rollout, list[dict[str, float]], list[dict[str, Any]]]:
        self.stats = {"rollout/workers_lost": 0.0, "rollout/episodes_restarted": 0.0}
        return super().collect(episodes, parallel)

    def _batch(self, n: int, rollout: Rollout, progress: Progress) -> list[Any]:
        if n % self.group_size:
            raise TeamTRError(f"a batch of {n} episodes does not hold whole groups of {self.group_size}: "
                              "make rollout.parallel and rollout.episodes multiples of rollout.group_size.")
        start = self.seeds.take(n // self.group_size)
        per = -(-n // len(self.workers))
        eps = [_Episode(start + i // self.group_size, self.episode_id + i, i // per) for i in range(n)]
        self.episode_id += n
        recipe = self.recipe()
        rows: list[tuple[_Episode, int, dict[str, Any]]] = []  # in the order inline would append them
        pending = {w: self._reset(w, recipe, eps) for w in range(len(self.workers)) if any(e.worker == w for e in eps)}
        done_before, rounds = progress.done, 0
        while pending:
            ready = self._wait(pending)
            results: list[tuple[_Episode, Result]] = []
            for w in ready:
                try:
                    self._receive(w, self.ray.get(pending.pop(w)), eps, results)
                except self.ray.exceptions.RayActorError:
                    pending[w] = self._replace(w, recipe, eps)
            self._record_results(results, rows)
            live = [e for e in eps if e.state is not None and e.worker in ready and e.worker not in pending]
            if live:
                self._score(live)
                for w in sorted({e.worker for e in live}):
                    pending[w] = self.workers[w].step.remote({e.id: e.scored[0].choices[e.scored[2]]
                                                             for e in live if e.worker == w})
            rounds += 1
            if self.on_round is not None:
                self.on_round(rounds, self.workers)
            progress.update(done_before + sum(e.done for e in eps), f"{len(rows)} decisions")
        for ep, attempt, row in rows:
            if attempt == ep.attempt:  # a restarted episode's lost attempt is dropped
                rollout.append(**row)
        return eps

    def _reset(self, w: int, recipe: TeamRecipe, eps: list[_Episode]) -> Any:
        return self.workers[w].reset.remote(recipe, [(e.id, e.seed) for e in eps if e.worker == w])

    def _wait(self, pending: dict[int, Any]) -> list[int]:
        """The workers whose replies are in: all of them in lockstep, else those ready now (>= 1)."""
        refs = list(pending.values())
        if self.lockstep:
            self.ray.wait(refs, num_returns=len(refs))
            return sorted(pending)
        self.ray.wait(refs, num_returns=1)
        done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        answered = set(done)
        return sorted(w for w, r in pending.items() if r in answered)

    def _receive(self, w: int, reply: list[Any], eps: list[_Episode], results: list[tuple[_Episode, Result]]) -> None:
        by_id = {e.id: e for e in eps}
        for item in reply:
            if len(item) == 4:  # a reset: (id, state, task, agents)
                ep = by_id[item[0]]
                ep.state, ep.task, ep.tracker, ep.steps = item[1], item[2], EpisodeTracker(item[3]), []
            else:
                results.append((by_id[item[0]], item[1]))

    def _record_results(self, results: list[tuple[_Episode, Result]], rows: list[Any]) -> None:
        """Rollout rows, metrics and transcripts of the decisions whose results came in (in the order
        the decisions were scored, as inline appends them); bootstrap values in one call."""
        results.sort(key=lambda r: r[0].scored[3])
        boot = self._bootstrap([r for _, r in results])
        for (ep, result), b in zip(results, boot):
            out, ref, k, _ = ep.scored
            self._record(lambda **row: rows.append((ep, ep.attempt, row)), ep, ep.state, out, ref, k, result, b)
            ep.done = bool(result[2])
            ep.state = None if ep.done else result[0]

    def _score(self, live: list[_Episode]) -> None:
        states = [e.state for e in live]
        out = self.coordinator.act(states, keep=True, generator=self.generator)
        ref = self.reference(states, out.logp)
        self._scored += 1
        for k, ep in enumerate(live):
            ep.scored = (out, ref, k, (self._scored, k))

    def _replace(self, w: int, recipe: TeamRecipe, eps: list[_Episode]) -> Any:
        """A new actor in place of dead worker ``w``; its unfinished episodes restart from their seeds."""
        self.workers[w] = self.actor_class.remote()
        lost = [e for e in eps if e.worker == w and not e.done]
        for e in lost:
            e.attempt += 1
            e.state = None
        self.stats["rollout/workers_lost"] += 1
        self.stats["rollout/episodes_restarted"] += len(lost)
        return self.workers[w].reset.remote(recipe, [(e.id, e.seed) for e in lost])

    def close(self) -> None:
        for actor in self.workers:
            self.ray.kill(actor)
        self.workers = []
