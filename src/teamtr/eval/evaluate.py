"""Evaluate a coordinator policy on a world over many seeds, stepping all episodes as one batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from teamtr.envs import make
from teamtr.eval.policies import Policy
from teamtr.rewards.terms import RewardComposer
from teamtr.team import Team, TeamBatch
from teamtr.telemetry.metrics import EpisodeMetrics, EpisodeTracker, summarize
from teamtr.telemetry.progress import Progress


def run_episodes(
    env_name: str,
    options: Mapping[str, Any] | None,
    policy: Policy,
    seeds: Sequence[int],
    rewards: RewardComposer | None = None,
    history_len: int = 3,
    label: str | None = None,
) -> list[EpisodeMetrics]:
    """One episode per seed of world ``env_name`` (built with ``options``), ``policy`` coordinating.

    All episodes step together in a ``TeamBatch``: each round, ``policy.choose`` gets the states of
    every live episode at once. Returns the metrics per seed, in ``seeds`` order. Progress (episodes
    done) shows as ``eval LABEL`` (default: the policy's class name, e.g. ``random``).
    """
    teams = [Team(make(env_name, **dict(options or {})), rewards=rewards, history_len=history_len)
             for _ in seeds]
    batch = TeamBatch(teams)
    batch.reset(list(seeds))
    trackers = [EpisodeTracker(len(team.world.agents)) for team in teams]
    name = label or type(policy).__name__.removesuffix("Policy").lower()
    with Progress(f"eval {name}", len(teams), unit="episodes") as progress:
        while live := batch.live():
            choices = policy.choose(batch.states())
            if len(choices) != len(live):
                raise ValueError(f"policy returned {len(choices)} choices for {len(live)} states")
            for index, (_, reward, _, info) in zip(live, batch.step(choices)):
                trackers[index].update(info["directive"], info["events"], reward, info["ticks"])
            progress.update(len(teams) - len(batch.live()))
    return [tracker.finish() for tracker in trackers]


__all__ = ["run_episodes", "summarize"]
