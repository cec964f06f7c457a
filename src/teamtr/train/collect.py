"""Episode collection for training: many teams step as one batch, the coordinator scores every live
state in one call, and each decision lands in a ``Rollout``; plus the training seeds' rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from teamtr.core import TeamTRError
from teamtr.eval.evaluate import step_record
from teamtr.policy.coordinator import CoordinatorLike
from teamtr.rewards.judge import Judge
from teamtr.rl import Rollout
from teamtr.team import Team, TeamBatch, TeamState
from teamtr.telemetry.metrics import EpisodeTracker
from teamtr.telemetry.progress import Progress
from teamtr.train.hierarchy import Hierarchy
from teamtr.train.noise import perturb
from teamtr.train.replay import SuccessReplay
from teamtr.train.whole_team import TokenActor

#: Seeds of run seed s start at (s * TRAIN_SEED_STRIDE) mod eval_seed_offset and count up, wrapping to 0
#: before eval_seed_offset: every training seed lies in [0, eval_seed_offset), for any run seed, so no
#: training episode ever replays a held-out one (evaluation uses [eval_seed_offset, ...)).
TRAIN_SEED_STRIDE = 100_003

Reference = Callable[[Sequence[TeamState], torch.Tensor], torch.Tensor]


class TrainSeeds:
    """The stream of training-episode seeds (see ``TRAIN_SEED_STRIDE``); ``next`` is checkpointed."""

    def __init__(self, seed: int, eval_seed_offset: int) -> None:
        if eval_seed_offset < 1:
            raise TeamTRError(f"train.eval_seed_offset = {eval_seed_offset}: must be >= 1 (training seeds "
                              "lie below it).")
        self.offset = int(eval_seed_offset)
        self.next = (int(seed) * TRAIN_SEED_STRIDE) % self.offset

    def take(self, n: int) -> int:
        """Reserve ``n`` consecutive seeds; return the first. They all lie below ``eval_seed_offset``."""
        if n > self.offset:
            raise TeamTRError(f"{n} training episodes need more seeds than lie below train.eval_seed_offset "
                              f"= {self.offset}; raise the offset.")
        start = self.next % self.offset
        if start + n > self.offset:
            start = 0  # wrap before the held-out range
        check_train_seeds(start, n, self.offset)
        self.next = start + n
        return start


def check_train_seeds(start: int, n: int, eval_seed_offset: int) -> None:
    """Raise if training seeds ``start .. start+n-1`` would reach the held-out range."""
    if start < 0 or start + n > eval_seed_offset:
        raise TeamTRError(f"training seeds {start}..{start + n - 1} reach the held-out range "
                          f"[{eval_seed_offset}, ...) (train.eval_seed_offset); this is a bug in seed drawing.")


@dataclass
class _Episode:
    """One episode being collected: its team, seed, id, metrics and transcript steps."""

    team: Team
    seed: int
    id: int
    tracker: EpisodeTracker
    steps: list[dict[str, Any]] = field(default_factory=list)
    swaps: int = 0  # decisions whose directive the exploration noise changed
    decisions: list[tuple[TeamState, int]] = field(default_factory=list)  # kept for the replay only

    @property
    def task(self) -> str:
        return self.team.world.task


class Collector:
    """Collects training episodes with ``coordinator`` (sampling with ``generator``) in worlds from
    ``make_team``; ``reference(states, logp)`` gives the KL reference's log-probs [B, Cmax].
    ``group_size`` episodes share each world seed (one group, for critic-free baselines: GRPO, RLOO);
    a batch of ``parallel`` teams holds whole groups. ``noise``: the probability of swapping an entity
    of each chosen directive (``train/noise.py``); the rollout stores the executed candidate. ``replay``:
    where successful episodes' decisions go (``train/replay.py``). ``actor``: acts in whole-team or free-text
    mode (``train/whole_team.py``, ``train/free_text.py``) instead of choosing candidates (neither noise
    nor replay apply there); the trainer sets it each iteration (a curriculum may switch modes).
    ``judge``: an LLM-judge reward term added to each decision's reward (``rewards.judge``).
    ``hierarchy``: the strategic level (``train/hierarchy.py``): it sets the due goals before each tick
    and collects its own rollout; this one stays the tactical level's."""

    def __init__(self, coordinator: CoordinatorLike, make_team: Callable[[], Team], seeds: TrainSeeds,
                 generator: torch.Generator, reference: Reference, episode_id: int = 0,
                 group_size: int = 1, noise: float = 0.0, replay: SuccessReplay | None = None,
                 actor: TokenActor | None = None, judge: Judge | None = None,
                 hierarchy: Hierarchy | None = None) -> None:
        self.coordinator, self.make_team, self.seeds = coordinator, make_team, seeds
        self.generator, self.reference, self.episode_id = generator, reference, episode_id
        self.group_size, self.noise, self.replay, self.actor = group_size, noise, replay, actor
        self.judge, self.hierarchy = judge, hierarchy
        self.stats: dict[str, float] = {}  # counters of the last collect() for the metrics line (backends)

    def collect(self, episodes: int, parallel: int) -> tuple[Rollout, list[dict[str, float]], list[dict[str, Any]]]:
        """Run ``episodes`` episodes, ``parallel`` teams at a time: (rollout, metrics per episode,
        transcripts)."""
        rollout = Rollout()
        metrics: list[dict[str, float]] = []
        transcripts: list[dict[str, Any]] = []
        remaining = episodes
        with Progress("rollout", episodes, unit="episodes", lines=1) as progress:
            while remaining > 0:
                n = min(parallel, remaining)
                remaining -= n
                for ep in self._batch(n, rollout, progress):
                    metrics.append(self._finish(ep, transcripts))
        return rollout, metrics, transcripts

    def close(self) -> None:
        """Release the backend's workers (inline holds none)."""

    def _finish(self, ep: _Episode, transcripts: list[dict[str, Any]]) -> dict[str, float]:
        """The episode's metrics; its transcript goes to ``transcripts``."""
        m = ep.tracker.finish()
        transcripts.append({"seed": ep.seed, "task": ep.task, "success": bool(m.success),
                            "return": m.episode_return, "steps": ep.steps})
        if self.replay is not None and m.success:
            self.replay.add(m.episode_return, ep.decisions)
        row = m.as_dict()
        if self.noise > 0:
            row["noise_swaps"] = float(ep.swaps)
        if self.hierarchy is not None:
            row.update(self.hierarchy.episode_row(ep.id))
        return row

    def _batch(self, n: int, rollout: Rollout, progress: Progress) -> list[_Episode]:
        if n % self.group_size:
            raise TeamTRError(f"a batch of {n} episodes does not hold whole groups of {self.group_size}: "
                              "make rollout.parallel and rollout.episodes multiples of rollout.group_size.")
        start = self.seeds.take(n // self.group_size)
        teams = [self.make_team() for _ in range(n)]
        eps = [_Episode(t, start + i // self.group_size, self.episode_id + i, EpisodeTracker(len(t.world.agents)))
               for i, t in enumerate(teams)]
        self.episode_id += n
        batch = TeamBatch([ep.team for ep in eps])
        batch.reset([ep.seed for ep in eps])
        done_before = progress.done
        while live := batch.live():
            self._tick(batch, [eps[i] for i in live], rollout)
            progress.update(done_before + n - len(batch.live()), f"{len(rollout)} decisions")
        return eps

    def _tick(self, batch: TeamBatch, live: list[_Episode], rollout: Rollout) -> None:
        if self.actor is not None:
            return self._tick_tokens(batch, live, rollout, self.actor)
        if self.hierarchy is not None:
            self.hierarchy.plan(live, self.generator)
        states = batch.states()
        out = self.coordinator.act(states, keep=True, generator=self.generator)
        ref = self.reference(states, out.logp)
        executed = [perturb(s.candidates, c, self.noise, self.generator) for s, c in zip(states, out.choices)]
        results = batch.step(executed)
        if self.judge is not None:  # every live team's decision judged in one scorer call
            results = self.judge.apply(results)
        if self.hierarchy is not None:
            self.hierarchy.after(live, results)
        boot = self._bootstrap(results)
        for k, (ep, result) in enumerate(zip(live, results)):
            self._record(rollout.append, ep, states[k], out, ref, k, result, boot[k], executed[k])

    def _record(self, append: Callable[..., None], ep: Any, state: TeamState, out: Any, ref: torch.Tensor, k: int,
                result: tuple[TeamState, float, bool, dict[str, Any]], boot: torch.Tensor,
                executed: int | None = None) -> None:
        """Decision ``k`` of a scored tick (``out``: the coordinator's ``ActOutput``, ``ref`` [B, Cmax]) and
        its ``result`` -> one rollout row via ``append``, the episode's metrics and transcript. ``executed``:
        the candidate carried out, when the exploration noise swapped the chosen one."""
        _, reward, _, info = result
        c = len(state.candidates)
        action = out.choices[k] if executed is None else executed
        ep.swaps += action != out.choices[k]
        if self.replay is not None:
            ep.decisions.append((state, action))
        append(logp=out.logp[k, :c], ref_logp=ref[k, :c], mask=out.mask[k, :c], actions=action,
               values=out.values[k], rewards=reward, terminated=info["terminated"],
               truncated=info["truncated"], episode_id=ep.id, handles=out.handles[k],
               bootstrap_values=boot, group_id=ep.seed)
        ep.tracker.update(info["directive"], info["events"], reward, info["ticks"])
        ep.steps.append(step_record(state, action, reward, info, out.logp[k, :c].exp().tolist()))

    def _tick_tokens(self, batch: TeamBatch, live: list[_Episode], rollout: Rollout, actor: TokenActor) -> None:
        states = batch.states()
        choices, values, handles = actor.act(states, self.generator)
        results = batch.step(choices)
        boot = self._bootstrap(results)
        for k, (ep, (_, reward, _, info)) in enumerate(zip(live, results)):
            actor.record(rollout, handles[k], float(values[k]), reward, info, ep.id, float(boot[k]), ep.seed)
            ep.tracker.update(info["directive"], info["events"], reward, info["ticks"])
            ep.steps.append(step_record(states[k], choices[k], reward, info))

    def _bootstrap(self, results: list[tuple[TeamState, float, bool, dict[str, Any]]]) -> torch.Tensor:
        """V(s_T) where a time limit that is not part of the task cut the episode, else 0: [B]."""
        cut = [k for k, r in enumerate(results) if r[3]["truncated"]]
        boot = torch.zeros(len(results))
        if cut:
            boot[cut] = self.coordinator.act([results[k][0] for k in cut]).values.float().cpu()
        return boot


def make_collector(rollout: Any, *args: Any, recipe: Callable[[], Any], **kwargs: Any) -> Collector:
    """The collector of ``rollout.backend`` (``inline``, or ``ray``: ``train/ray_rollout.py``, whose
    workers build teams from ``recipe()``); ``args``/``kwargs`` go to ``Collector``."""
    if rollout.backend == "ray":
        from teamtr.train.ray_rollout import RayCollector

        unsupported = [name for name in ("noise", "replay", "actor", "judge", "hierarchy") if kwargs.get(name)]
        if unsupported:
            raise TeamTRError(f"rollout.backend = ray does not run {', '.join(unsupported)} yet (policy.noise, "
                              "algo.replay_coef, team.directives=whole_team, rewards.judge): use rollout.backend=inline.")

        return RayCollector(*args, recipe=recipe, workers=rollout.workers, lockstep=rollout.lockstep,
                            address=rollout.ray_address, **kwargs)
    return Collector(*args, **kwargs)
