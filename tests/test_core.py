"""Core types: validation with readable errors, the no-op, and the World protocol."""

import dataclasses

import pytest

from teamtr.core import EVENT_KINDS, NOOP, Directive, Event, World
from teamtr.envs import make


def test_directive_rejects_unknown_kind_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="'order' is not one of schedule, goal, allocate, noop"):
        Directive("agent_A: go", "agent_A", "go", kind="order")


def test_directive_rejects_empty_text():
    with pytest.raises(ValueError, match="empty"):
        Directive("   ", "agent_A", "go")


@pytest.mark.parametrize("kind", ["", "   ", "hand off", "2fast"])
def test_event_rejects_a_kind_that_is_not_an_identifier(kind):
    with pytest.raises(ValueError, match=f"Event kind {kind!r} is not an identifier"):
        Event(kind)


def test_event_keeps_a_worlds_own_kind():
    assert "handoff" not in EVENT_KINDS
    assert Event("handoff", "runner_1", "baton to runner_2").kind == "handoff"


def test_noop_addresses_nobody():
    assert (NOOP.kind, NOOP.target, NOOP.task, NOOP.text) == ("noop", None, "noop", "no new directive")


def test_directives_are_values_equal_by_every_field():
    # Team finds the expert among the candidates by equality, and BC/logs key on directives: two
    # directives are the same exactly when all four fields are, and they cannot change once made.
    base = Directive("agent_A: fetch the map", "agent_A", "fetch:map")
    assert base.kind == "schedule"
    same = Directive("agent_A: fetch the map", "agent_A", "fetch:map", "schedule")
    assert base == same and hash(base) == hash(same) and len({base, same}) == 1
    for field, other in (("text", "agent_A: fetch the key"), ("target", "agent_B"), ("task", "fetch:key"),
                         ("kind", "allocate")):
        changed = dataclasses.replace(base, **{field: other})
        assert changed != base and (changed,).index(changed) == 0 and base not in (changed,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.text = "agent_B: go"  # type: ignore[misc]


@pytest.mark.parametrize("name", ["escape-room", "software-team"])
def test_builtin_worlds_satisfy_the_world_protocol(name):
    world = make(name)
    assert isinstance(world, World)
    world.reset(0)
    assert world.outcome() is None and world.decision_due() is True and world.truncated() is False
    view = world.view(world.agents[0])
    assert view.agent == world.agents[0] and "wait" in view.actions
