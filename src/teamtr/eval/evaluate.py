"""Evaluate a coordinator policy on a world over many seeds, stepping all episodes as one batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from teamtr.envs import make
from teamtr.eval.policies import Policy
from teamtr.rewards.terms import RewardComposer
from teamtr.team import AgentFactory, FreeText, Team, TeamBatch, TeamState
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
    transcripts: list[dict[str, Any]] | None = None,
    make_agent: AgentFactory | None = None,
) -> list[EpisodeMetrics]:
    """One episode per seed of world ``env_name`` (built with ``options``), ``policy`` coordinating.

    All episodes step together in a ``TeamBatch``: each round, ``policy.choose`` gets the states of
    every live episode at once. Returns the metrics per seed, in ``seeds`` order. Progress (episodes
    done) shows as ``eval LABEL`` (default: the policy's class name, e.g. ``random``).

    ``transcripts``: when a list is given, one record per episode is appended to it in the report
    viewer's format (``teamtr.telemetry.viewer``): seed, task, success, return and per decision the
    state, history, candidates, choice, directive, reward, reward terms, events and, when the policy
    exposes them (``last_probs``), the candidates' probabilities.

    ``make_agent``: the role agents (``eval.team_agents.agent_factory``); default: scripted.
    """
    teams = [Team(make(env_name, **dict(options or {})), rewards=rewards, history_len=history_len,
                  make_agent=make_agent) for _ in seeds]
    batch = TeamBatch(teams)
    batch.reset(list(seeds))
    trackers = [EpisodeTracker(len(team.world.agents)) for team in teams]
    steps: list[list[dict[str, Any]]] = [[] for _ in teams]
    name = label or type(policy).__name__.removesuffix("Policy").lower()
    with Progress(f"eval {name}", len(teams), unit="episodes") as progress:
        plan = getattr(policy, "plan", None)  # a hierarchical policy sets the due goals first
        while live := batch.live():
            if plan is not None:
                plan([teams[i] for i in live])
            states = batch.states()
            choices = policy.choose(states)
            if len(choices) != len(live):
                raise ValueError(f"policy returned {len(choices)} choices for {len(live)} states")
            probs = getattr(policy, "last_probs", None) if transcripts is not None else None
            for k, (index, (_, reward, _, info)) in enumerate(zip(live, batch.step(choices))):
                trackers[index].update(info["directive"], info["events"], reward, info["ticks"])
                if transcripts is not None:
                    steps[index].append(step_record(states[k], choices[k], reward, info,
                                                    probs[k] if probs is not None else None))
            progress.update(len(teams) - len(batch.live()))
    metrics = [tracker.finish() for tracker in trackers]
    if transcripts is not None:
        transcripts += [{"policy": name, "seed": seed, "task": team.world.task, "success": bool(m.success),
                         "return": m.episode_return, "steps": s}
                        for seed, team, m, s in zip(seeds, teams, metrics, steps)]
    return metrics


def step_record(state: TeamState, choice: int | Sequence[int] | FreeText, reward: float, info: Mapping[str, Any],
                probs: Sequence[float] | None = None) -> dict[str, Any]:
    """One decision as the report viewer shows it (``probs``: the policy's, one per candidate). A
    whole-team choice is ``choice`` -1 with its ``lines`` (candidate indices); a free-text one adds
    its ``text`` (``lines`` null: it did not parse)."""
    extra: dict[str, Any] = {}
    if isinstance(choice, FreeText):
        extra = {"text": choice.text, "lines": None if choice.lines is None else list(choice.lines)}
    elif isinstance(choice, (list, tuple)):
        extra = {"lines": [int(i) for i in choice]}
    record = {"tick": state.tick, "state": state.state, "history": list(state.history),
              "candidates": [d.text for d in state.candidates], "choice": -1 if extra else int(choice), **extra,
              "directive": info["directive"].text, "reward": reward, "events": [e.kind for e in info["events"]],
              "terms": {k: float(v) for k, v in info["terms"].items()}}
    if state.goal:
        record["goal"] = state.goal
    if probs is not None:
        record["probs"] = [round(float(p), 6) for p in probs[: len(state.candidates)]]
    return record


__all__ = ["run_episodes", "summarize"]
