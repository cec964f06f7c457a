"""Evaluation suites: the seed's generalisation tests, and policies x suites tables.

``generalisation``: the trained setting, one more agent ("train with 3 agents, test with 4"), and the
held-out vocabulary of agent, item and zone names ("train on A, B, C, test on D, E, F"). Each world
declares the options these use (``team_size_option``, ``vocabulary_option``; see ``core.World``), so
the suite works for plug-in worlds as for the built-in ones.

A world may also declare ``split_option = (option, every value)`` (Overcooked: ``("layout",
LAYOUTS)``): an option that may hold a *list* of values, one drawn per episode. Trained on a list,
the tables show one suite per value (``layout=cramped_room``: a row per layout, never an average
over kitchens), and ``generalisation`` adds each value the list leaves out (``layout=forced_coordination
unseen``: the seed's "train on A, B, C, test on D", here leave-one-layout-out).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from teamtr.core import TeamTRError
from teamtr.envs import world_class
from teamtr.eval.policies import EXPERT_NAMES, Policy, expert_name
from teamtr.eval.evaluate import run_episodes
from teamtr.rewards.terms import RewardComposer
from teamtr.team import AgentFactory
from teamtr.telemetry.metrics import METRICS, headline_metrics, summarize


SUITES = ("heldout", "generalisation")


def suites(env_name: str, options: Mapping[str, Any], which: str = "heldout") -> dict[str, dict[str, Any]]:
    """Suite name -> world options. ``heldout``: the training setting on held-out seeds only (one
    suite per value of a listed ``split_option``); ``generalisation``: that, plus the split option's
    unseen values, one more agent and held-out names, as far as world ``env_name`` declares the
    options for them."""
    if which not in SUITES:
        raise TeamTRError(f"--suite {which!r} is not one of {', '.join(SUITES)}.")
    base = dict(options)
    cls = world_class(env_name)
    split = getattr(cls, "split_option", None)
    values = base.get(split[0]) if split is not None else None
    if isinstance(values, (list, tuple)):  # one suite per value trained on; later, the unseen ones
        key = split[0]
        out = {f"{key}={v}": {**base, key: v} for v in values}
        if which == "generalisation":
            out.update({f"{key}={v} unseen": {**base, key: v} for v in split[1] if v not in values})
    else:
        out = {"heldout": base}
    if which == "heldout":
        return out
    if cls.team_size_option is not None:
        key, default = cls.team_size_option
        n = int(base.get(key, default)) + 1
        out[f"{key}={n}"] = {**base, key: n}
    if cls.vocabulary_option is not None:
        key, value = cls.vocabulary_option
        if base.get(key) != value:  # evaluated on held-out names already (train.eval_env): no second copy
            out[f"{key}={value}"] = {**base, key: value}
    return out


def eval_options(env_options: Mapping[str, Any], eval_env: Mapping[str, Any]) -> dict[str, Any]:
    """The world options every evaluation uses: the run's ``env`` options with ``train.eval_env``
    over them (a run may train on shorter episodes than the task it is measured on)."""
    return {**env_options, **eval_env}


def table_columns(env_name: str) -> tuple[str, ...]:
    """The columns of world ``env_name``'s tables: ``success``, then its headline metrics (soups
    delivered, landmarks covered), then the other ``METRICS``."""
    headline = tuple(headline_metrics(world_class(env_name)))
    return METRICS[:1] + headline + METRICS[1:]


def evaluate_table(env_name: str, suite_options: Mapping[str, Mapping[str, Any]],
                   policies: Mapping[str, Policy], seeds: list[int],
                   rewards: RewardComposer | None = None, history_len: int = 3,
                   transcripts: list[dict[str, Any]] | None = None,
                   make_agent: AgentFactory | None = None) -> dict[str, dict[str, float]]:
    """Rows ``"policy"`` or ``"policy @ suite"`` -> summarised metrics over ``seeds``, with the world's
    headline metrics (``telemetry.metrics.headline_metrics``); each episode's transcript is appended to
    ``transcripts`` when given, labelled with its row; ``make_agent``: the role agents (default:
    scripted). The expert's row takes the world's word for it (``oracle``, or ``heuristic`` where the
    expert is a hand-written rule, see ``expert_name``)."""
    cls = world_class(env_name)
    headline = headline_metrics(cls)
    rows: dict[str, dict[str, float]] = {}
    for name, policy in policies.items():
        shown = expert_name(cls) if name in EXPERT_NAMES else name
        # A policy may hold a session open over all its episodes (e.g. an adapter merged once).
        with getattr(policy, "session", contextlib.nullcontext)():
            for suite, opts in suite_options.items():
                label = shown if len(suite_options) == 1 else f"{shown} @ {suite}"
                rows[label] = summarize(run_episodes(env_name, dict(opts), policy, seeds, rewards=rewards,
                                                     history_len=history_len, label=label,
                                                     transcripts=transcripts, make_agent=make_agent), headline)
    return rows
