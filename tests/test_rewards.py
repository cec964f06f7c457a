"""Reward terms and episode metrics, against hand-computed numbers."""

import pytest

from teamtr.core import NOOP, Directive, Event, TeamTRError
from teamtr.rewards import DEFAULT_WEIGHTS, TERMS, RewardComposer, similarity
from teamtr.telemetry import METRICS, EpisodeTracker, summarize

FETCH = Directive("agent_B: fetch the map", "agent_B", "fetch:map")
LONG = Directive("agent_B: please go and fetch the map now and bring it back", "agent_B", "fetch:map")


def test_terms_are_weighted_event_counts_and_sum_to_the_total():
    events = [Event("success"), Event("milestone"), Event("milestone"), Event("idle"),
              Event("idle"), Event("conflict"), Event("directive_invalid"), Event("duplicate")]
    total, terms = RewardComposer()(events, LONG, LONG)
    assert set(terms) == set(TERMS)
    # 10 + 2*1 - 2*0.05 - 0.5 - 0.5 - 0.5 - 0.01*(12-8 words) - 0.2*1.0 (same text)
    assert terms["length"] == pytest.approx(-0.04) and terms["repeat"] == pytest.approx(-0.2)
    assert total == pytest.approx(10 + 2 - 0.1 - 1.5 - 0.04 - 0.2)
    assert total == pytest.approx(sum(terms.values()))


def test_noop_pays_no_length_or_repeat_and_similar_directives_below_threshold_are_not_spam():
    composer = RewardComposer()
    assert composer([], NOOP, NOOP) == (0.0, dict.fromkeys(TERMS, 0.0))
    other = Directive("agent_A: fetch the key", "agent_A", "fetch:key")
    assert similarity(FETCH.text, other.text) == pytest.approx(2 / 6)
    assert composer([], FETCH, other)[1]["repeat"] == 0.0


def test_weights_override_defaults_and_failure_is_negative():
    total, terms = RewardComposer({"failure": -20})([Event("failure")], NOOP, None)
    assert total == -20 and DEFAULT_WEIGHTS["failure"] == -5.0


def test_schedule_switches_a_term_on_later():
    composer = RewardComposer(schedule={"idle": 50})
    assert composer([Event("idle")], NOOP, None)[0] == 0.0
    composer.set_progress(50)
    assert composer([Event("idle")], NOOP, None)[0] == pytest.approx(-0.05)


def test_unknown_term_names_the_allowed_ones():
    with pytest.raises(TeamTRError, match="rewards.weights has unknown term 'speed'; allowed terms: success"):
        RewardComposer({"speed": 1.0})
    with pytest.raises(TeamTRError, match="rewards.schedule has unknown term 'x'"):
        RewardComposer(schedule={"x": 3})


def test_episode_metrics_from_events():
    tracker = EpisodeTracker(n_agents=2)
    tracker.update(FETCH, [Event("directive_followed", "agent_B"), Event("idle", "agent_A")], 1.0)
    tracker.update(FETCH, [Event("directive_invalid", "agent_B")], -0.5)
    tracker.update(NOOP, [Event("milestone"), Event("conflict"), Event("conflict")], 0.5)
    tracker.update(FETCH, [Event("directive_ignored", "agent_B"), Event("success")], 10.0, ticks=3)
    m = tracker.finish().as_dict()
    assert list(m) == list(METRICS)
    assert m == {"success": 1.0, "return": 11.0, "length": 4.0, "conflicts": 2.0,
                 "idle_rate": pytest.approx(1 / 12), "comm_effectiveness": pytest.approx(1 / 3),
                 "invalid_rate": pytest.approx(1 / 3), "repeat_rate": pytest.approx(2 / 3),
                 "milestones": 1.0}
    both = summarize([tracker.finish(), EpisodeTracker(2).finish()])
    assert both["success"] == 0.5 and both["return"] == 5.5 and both["episodes"] == 2


def test_a_worlds_own_event_kinds_count_in_no_term_and_per_kind_in_the_metrics():
    own = [Event("handoff", "runner_1"), Event("handoff", "runner_2"), Event("followed", "runner_2")]
    composer = RewardComposer()
    with_own, terms_own = composer([*own, Event("idle", "runner_3")], FETCH, None)
    without, terms = composer([Event("idle", "runner_3")], FETCH, None)
    assert with_own == without == pytest.approx(-0.05) and terms_own == terms
    tracker = EpisodeTracker(n_agents=3)
    tracker.update(FETCH, [*own, Event("directive_followed", "runner_1")], 0.0)
    tracker.update(FETCH, [Event("handoff", "runner_3"), Event("failure")], -5.0)
    first = tracker.finish()
    # "followed" is a world's own kind, not the built-in directive_followed: it is no delivery
    assert first.comm_effectiveness == 1.0 and first.other_events == {"followed": 1, "handoff": 3}
    assert list(first.as_dict()) == list(METRICS)
    table = summarize([first, EpisodeTracker(3).finish()])
    assert table["events/handoff"] == 1.5 and table["events/followed"] == 0.5
    assert list(table)[: len(METRICS) + 1] == [*METRICS, "episodes"]
