"""Goals for a hierarchical coordinator: when the strategic level decides, and what it sees.

With ``team.hierarchy.enabled`` a *strategic* level picks the team's phase goal among the world's goals
(``core.GoalWorld``: software-team's requirements -> design -> development -> test, escape-room's one
goal per item, then the door) and a *tactical* level, reading the goal in its prompt, directs the
agents as the flat coordinator does. The strategic level decides at the episode's first decision,
again once ``every`` world ticks have passed under the goal in force, and (``at_milestones``) after
any tactical decision that reached a milestone. A goal is never delivered to the role agents: it
conditions the tactical level only. No torch here: the coordinator's side is ``eval.policies`` (acting)
and ``train.hierarchy`` (learning).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from teamtr.core import GoalWorld, TeamTRError, World
from teamtr.team import Team, TeamState

#: Appended to the world's task text in the strategic level's prompt (its static prefix).
STRATEGIC_ROLE = "You set the team's phase goal; a tactical coordinator directs the agents toward it."


@dataclass(frozen=True)
class GoalSchedule:
    """When the strategic level decides (``team.hierarchy.every`` and ``at_milestones``)."""

    every: int = 4
    at_milestones: bool = True

    def __post_init__(self) -> None:
        if self.every < 1:
            raise TeamTRError(f"team.hierarchy.every={self.every}: must be >= 1 (world ticks between goals).")

    @classmethod
    def from_config(cls, hierarchy: object) -> GoalSchedule:
        return cls(int(hierarchy.every), bool(hierarchy.at_milestones))  # type: ignore[attr-defined]

    def due(self, team: Team) -> bool:
        """True when ``team``'s strategic level should choose a goal before its next tactical decision."""
        if team.finished:
            return False
        if team.goal is None or team.ticks - team.goal_tick >= self.every:
            return True
        return self.at_milestones and team.milestones > team.goal_milestones


def check_goals(world: World) -> GoalWorld:
    """``world`` as a ``GoalWorld``, else an error naming the fix."""
    if not isinstance(world, GoalWorld):
        raise TeamTRError(f"team.hierarchy.enabled=true, but world {getattr(world, 'name', world)!r} exposes no "
                          "goals (goals() and expert_goal(), core.GoalWorld; escape-room and software-team do): "
                          "set team.hierarchy.enabled=false, or give the world goals.")
    return world


def goal_state(team: Team) -> TeamState:
    """The strategic decision at ``team``'s current state: the world's goals as candidates (the
    oracle's as ``expert``), the task text with ``STRATEGIC_ROLE``, the goal in force as ``goal``."""
    world = check_goals(team.world)
    assert team.state is not None, "goal_state() before reset()"
    goals = tuple(world.goals())
    if not goals:
        raise TeamTRError(f"{team.world.name}: goals() is empty while the episode runs; a GoalWorld offers at "
                          "least one goal until the episode ends.")
    try:
        expert = goals.index(world.expert_goal())
    except ValueError:
        raise TeamTRError(f"{team.world.name}: expert_goal() is not among goals(); the two disagree.") from None
    return replace(team.state, task=f"{team.state.task}\n{STRATEGIC_ROLE}", candidates=goals, expert=expert,
                   expert_lines=())  # the tactical oracle's lines index the directives, not the goals
