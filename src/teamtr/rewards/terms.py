"""Composable, weighted reward terms computed from a decision's events (the seed's section 4.2).

Every term is ``weight * count`` where the count comes from the events of the decision, the chosen
directive and the previous one; never from a world's internals. The total is exactly the sum of the
terms, so a log of the per-term dict explains every reward.

Term names are config keys:

- ``success`` / ``failure``: the final task reward (one ``success`` / ``failure`` event).
- ``milestone``: one per ``milestone`` event (a sub-goal reached: an item at the door, a PRD done).
- ``conflict``, ``idle``, ``duplicate``: team-efficiency penalties, one per event of that kind.
- ``invalid``: one per ``directive_invalid`` event (a directive an agent could not carry out).
- ``length``: per word of the directive over ``LENGTH_FREE_WORDS`` (no long-winded directives).
- ``repeat``: the word-set similarity between this directive and the previous one, counted when it is
  at least ``REPEAT_THRESHOLD`` (no spamming the same directive; different agents doing similar
  templated work, "agent_A: fetch the map" then "agent_B: fetch the key", is not spam).

A world's own event kinds (``core.EVENT_KINDS`` lists the built-in ones) count in no term: they are
logged and counted by the metrics, and a term for them would be a new entry in ``TERMS``.

The seed's advice "sparse first, dense later" is a ``schedule``: ``{"idle": 50}`` switches the idle
term on from training iteration 50 (``set_progress(iteration)``); before that its weight is 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from teamtr.core import Directive, Event, TeamTRError

TERMS: tuple[str, ...] = (
    "success",
    "failure",
    "milestone",
    "conflict",
    "idle",
    "duplicate",
    "invalid",
    "length",
    "repeat",
    "env",
)

#: Dense but sane defaults: the final reward dominates, shaping terms are an order of magnitude smaller.
DEFAULT_WEIGHTS: dict[str, float] = {
    "success": 10.0,
    "failure": -5.0,
    "milestone": 1.0,
    "conflict": -0.5,
    "idle": -0.05,
    "duplicate": -0.5,
    "invalid": -0.5,
    "length": -0.01,
    "repeat": -0.2,
    "env": 1.0,  # the world's own team reward (Overcooked: 20 per soup; MPE: its spread reward)
}

LENGTH_FREE_WORDS = 8
REPEAT_THRESHOLD = 0.8

# Event kind counted by each event-driven term.
_EVENT_OF_TERM = {
    "success": "success",
    "failure": "failure",
    "milestone": "milestone",
    "conflict": "conflict",
    "idle": "idle",
    "duplicate": "duplicate",
    "invalid": "directive_invalid",
}


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the lower-cased word sets of two texts, in [0, 1] (1: same words)."""
    wa, wb = set(a.lower().split()), set(b.lower().split())
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)


class RewardComposer:
    """Weighted sum of reward terms.

    Args:
        weights: term -> weight; missing terms take ``DEFAULT_WEIGHTS``; ``None``: all defaults.
        schedule: term -> the training iteration from which the term counts (weight 0 before).
    """

    def __init__(
        self, weights: Mapping[str, float] | None = None, schedule: Mapping[str, int] | None = None
    ) -> None:
        self.weights = dict(DEFAULT_WEIGHTS)
        for source, table in (("weights", weights or {}), ("schedule", schedule or {})):
            for term in table:
                if term not in TERMS:
                    raise TeamTRError(
                        f"rewards.{source} has unknown term {term!r}; allowed terms: "
                        f"{', '.join(TERMS)}."
                    )
        for term, weight in (weights or {}).items():
            self.weights[term] = float(weight)
        self.schedule = {term: int(start) for term, start in (schedule or {}).items()}
        self.progress = 0

    def set_progress(self, iteration: int) -> None:
        """Tell the composer the current training iteration (for the weight schedule)."""
        self.progress = int(iteration)

    def weight(self, term: str) -> float:
        """The weight of ``term`` now (0 while its schedule has not started)."""
        if self.progress < self.schedule.get(term, 0):
            return 0.0
        return self.weights[term]

    def __call__(
        self, events: Iterable[Event], directive: Directive, previous: Directive | None,
        native: float = 0.0,
    ) -> tuple[float, dict[str, float]]:
        """Reward of one decision.

        Args:
            events: every event of the decision (role agents' and the world's, all ticks).
            directive: the chosen directive; ``previous``: the one chosen at the decision before.
            native: the world's own reward over the decision's ticks (``world.tick_reward``
                summed), for benchmark worlds that define one; the ``env`` term weighs it.

        Returns:
            ``(total, terms)`` where ``terms`` maps every term name to its weighted value and
            ``total == sum(terms.values())``.
        """
        counts = dict.fromkeys(TERMS, 0.0)
        counts["env"] = float(native)
        kinds = [event.kind for event in events]
        for term, kind in _EVENT_OF_TERM.items():
            counts[term] = float(kinds.count(kind))
        if directive.kind != "noop":
            counts["length"] = float(max(0, len(directive.text.split()) - LENGTH_FREE_WORDS))
            if previous is not None and previous.kind != "noop":
                sim = similarity(directive.text, previous.text)
                counts["repeat"] = sim if sim >= REPEAT_THRESHOLD else 0.0
        terms = {term: self.weight(term) * counts[term] for term in TERMS}
        return sum(terms.values()), terms
