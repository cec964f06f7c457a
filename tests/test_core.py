"""Core types: validation with readable errors, the no-op, and the World protocol."""

import pytest

from teamtr.core import NOOP, Directive, Event, World
from teamtr.envs import make


def test_directive_rejects_unknown_kind_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="'order' is not one of schedule, goal, allocate, noop"):
        Directive("agent_A: go", "agent_A", "go", kind="order")


def test_directive_rejects_empty_text():
    with pytest.raises(ValueError, match="empty"):
        Directive("   ", "agent_A", "go")


def test_event_rejects_unknown_kind():
    with pytest.raises(ValueError, match="'explosion' is not one of"):
        Event("explosion")


def test_noop_addresses_nobody():
    assert (NOOP.kind, NOOP.target, NOOP.task, NOOP.text) == ("noop", None, "noop", "no new directive")


def test_directives_are_values():
    assert Directive("agent_A: fetch the map", "agent_A", "fetch:map") == Directive(
        "agent_A: fetch the map", "agent_A", "fetch:map", "schedule"
    )


@pytest.mark.parametrize("name", ["escape-room", "software-team"])
def test_builtin_worlds_satisfy_the_world_protocol(name):
    world = make(name)
    assert isinstance(world, World)
    world.reset(0)
    assert world.outcome() is None and world.decision_due() is True
    view = world.view(world.agents[0])
    assert view.agent == world.agents[0] and "wait" in view.actions
