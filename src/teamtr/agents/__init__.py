"""Role agents: turn the directive in force into primitive actions (no torch in scripted agents)."""

from teamtr.agents.scripted import ScriptedAgent

__all__ = ["ScriptedAgent"]
