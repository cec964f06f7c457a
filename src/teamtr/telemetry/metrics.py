"""Per-episode collaboration metrics, computed from events (the seed's section 5.3).

Names (used as-is in logs and tables): ``success``, ``return``, ``length``, ``conflicts``,
``idle_rate``, ``comm_effectiveness``, ``invalid_rate``, ``repeat_rate``, ``milestones``.

- ``success``: 1.0 if the episode ended in success, else 0.0.
- ``return``: the sum of the decision rewards (undiscounted).
- ``length``: coordinator decisions in the episode.
- ``conflicts`` / ``milestones``: counts of those events.
- ``idle_rate``: idle events per agent-tick.
- ``comm_effectiveness``: share of directive deliveries the agents carried out (``directive_followed``
  over followed + ignored + invalid; a pairing reaches two agents and counts twice; 0 when the
  coordinator gave no directive at all).
- ``invalid_rate``: ``directive_invalid`` over the same deliveries.
- ``repeat_rate``: share of non-no-op decisions that repeat the previous non-no-op directive verbatim.

A world's own event kinds (those outside ``core.EVENT_KINDS``, such as a relay world's ``handoff``)
are counted per kind in ``EpisodeMetrics.other_events``; ``summarize`` adds their mean count per
episode as ``events/<kind>`` (0 for an episode without them). The columns above stay fixed, so a
table or a log line has the same keys whatever the world.

**Headline metrics.** A world may name the figure its own task is judged by, as the per-episode count
of one of its own event kinds: a class attribute ``headline_metrics = {"soups": "soup"}`` (Overcooked:
soups delivered) or ``{"landmarks_covered": "covered_at_end"}`` (MPE spread: landmarks covered when
the episode ends). ``summarize(..., headline=...)`` adds each as a column of its own (the mean count
per episode, 0 when never seen), which the CLI and report tables show right after ``success``, with its
spread over the episodes as ``<name>_std`` (shown as mean ± std).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teamtr.core import EVENT_KINDS, Directive, Event, TeamTRError

METRICS: tuple[str, ...] = (
    "success",
    "return",
    "length",
    "conflicts",
    "idle_rate",
    "comm_effectiveness",
    "invalid_rate",
    "repeat_rate",
    "milestones",
)


@dataclass(frozen=True)
class EpisodeMetrics:
    """The metrics of one finished episode (``episode_return`` is logged as ``return``)."""

    success: float
    episode_return: float
    length: int
    conflicts: int
    idle_rate: float
    comm_effectiveness: float
    invalid_rate: float
    repeat_rate: float
    milestones: int
    other_events: dict[str, int] = field(default_factory=dict)  # a world's own kind -> count

    def as_dict(self) -> dict[str, float]:
        """Metric name -> value, with the names of ``METRICS``."""
        values = {name: getattr(self, name) for name in METRICS if name != "return"}
        values["return"] = self.episode_return
        return {name: float(values[name]) for name in METRICS}


class EpisodeTracker:
    """Accumulates one episode's decisions; ``finish()`` gives its ``EpisodeMetrics``.

    Args:
        n_agents: role agents in the world (the idle rate is per agent-tick).
    """

    def __init__(self, n_agents: int) -> None:
        self.n_agents = n_agents
        self.counts = dict.fromkeys(
            ("followed", "ignored", "invalid", "idle", "conflict", "milestone"), 0
        )
        self.ret = 0.0
        self.decisions = 0
        self.ticks = 0
        self.issued = 0
        self.repeats = 0
        self.outcome: str | None = None
        self.other: Counter[str] = Counter()
        self._last: Directive | None = None

    def update(self, directive: Directive, events: Iterable[Event], reward: float, ticks: int = 1) -> None:
        """Record one decision: the chosen directive, its events, its reward and world ticks."""
        self.decisions += 1
        self.ticks += ticks
        self.ret += reward
        if directive.kind != "noop":
            self.issued += 1
            if self._last is not None and self._last.text == directive.text:
                self.repeats += 1
            self._last = directive
        for event in events:
            key = event.kind.removeprefix("directive_")
            if event.kind not in EVENT_KINDS:
                self.other[event.kind] += 1
            elif key in self.counts:
                self.counts[key] += 1
            elif event.kind in ("success", "failure"):
                self.outcome = event.kind

    def finish(self) -> EpisodeMetrics:
        """The metrics of the episode so far (call once it has ended)."""
        deliveries = self.counts["followed"] + self.counts["ignored"] + self.counts["invalid"]
        return EpisodeMetrics(
            success=1.0 if self.outcome == "success" else 0.0,
            episode_return=self.ret,
            length=self.decisions,
            conflicts=self.counts["conflict"],
            idle_rate=self.counts["idle"] / max(1, self.ticks * self.n_agents),
            comm_effectiveness=self.counts["followed"] / deliveries if deliveries else 0.0,
            invalid_rate=self.counts["invalid"] / deliveries if deliveries else 0.0,
            repeat_rate=self.repeats / self.issued if self.issued else 0.0,
            milestones=self.counts["milestone"],
            other_events=dict(sorted(self.other.items())),
        )


def headline_metrics(world: Any) -> dict[str, str]:
    """A world's (or world class's) headline metrics: metric name -> the event kind of its own whose
    count per episode the metric is; ``{}`` when it declares none (see the module docstring)."""
    declared = dict(getattr(world, "headline_metrics", None) or {})
    for name, kind in declared.items():
        if name in METRICS or name == "episodes" or kind in EVENT_KINDS:
            raise TeamTRError(f"{getattr(world, 'name', world)}: headline metric {name!r} -> {kind!r} is not allowed: "
                              f"name a new metric (not one of {', '.join(METRICS)}) and an event kind of the "
                              "world's own (not a built-in one).")
    return declared


def summarize(episodes: Sequence[EpisodeMetrics], headline: Mapping[str, str] | None = None) -> dict[str, float]:
    """Mean of every metric over ``episodes``, plus ``episodes`` (how many), ``events/<kind>`` (the
    mean count per episode of each of the worlds' own event kinds seen) and each ``headline`` metric
    (name -> event kind, from ``headline_metrics``: that kind's mean count per episode) with its spread
    over the episodes, ``<name>_std`` (population std; tables put it in its metric's cell, ``with_spread``)."""
    if not episodes:
        return {"episodes": 0.0, **dict.fromkeys(headline or {}, 0.0),
                **{f"{name}_std": 0.0 for name in headline or {}}}
    rows = [episode.as_dict() for episode in episodes]
    out = {name: sum(row[name] for row in rows) / len(rows) for name in METRICS}
    out["episodes"] = float(len(rows))
    other: Counter[str] = Counter()
    for episode in episodes:
        other.update(episode.other_events)
    out.update({f"events/{kind}": count / len(rows) for kind, count in sorted(other.items())})
    for name, kind in (headline or {}).items():
        counts = [episode.other_events.get(kind, 0) for episode in episodes]
        out[name], out[f"{name}_std"] = statistics.fmean(counts), statistics.pstdev(counts)
    return out


def spread_columns(columns: Iterable[str]) -> list[str]:
    """``columns`` without the ``<metric>_std`` ones whose metric is there too: tables show a metric's
    spread in its own cell (``with_spread``), not as a column of its own."""
    columns = list(columns)
    return [c for c in columns if not (c.endswith("_std") and c.removesuffix("_std") in columns)]


def with_spread(row: Mapping[str, Any], metric: str, digits: int = 3, pm: str = "±") -> str | None:
    """``row[metric]`` as text, ``mean ± std`` where the row has ``<metric>_std`` (``summarize``'s spread
    over episodes); None when the row has no number for ``metric``."""
    value, std = row.get(metric), row.get(f"{metric}_std")
    if not isinstance(value, (int, float)):
        return None
    return f"{value:.{digits}f} {pm} {std:.{digits}f}" if isinstance(std, (int, float)) else f"{value:.{digits}f}"
