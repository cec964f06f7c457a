"""Mixed teams: which kind of role agent plays which world agent (``team.agents`` in the config).

``kinds`` maps an agent name (``engineer_1``), a role word (``engineer``: every engineer) or
``default`` to ``scripted``, ``llm`` or ``remote``; an exact name wins over a role word, which wins
over ``default`` (itself ``scripted`` unless given). ``role_prompts`` is keyed the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from teamtr.agents.chooser import ChoosingAgent, Resolver, role_word
from teamtr.agents.llm import LLMAgent
from teamtr.agents.remote import RemoteAgent
from teamtr.agents.scripted import ScriptedAgent
from teamtr.core import TeamTRError, World

#: agent kind -> the class of its agents (scripted ones take the world's compliance instead).
CHOOSING: dict[str, type[ChoosingAgent]] = {"llm": LLMAgent, "remote": RemoteAgent}
KINDS = ("scripted", *CHOOSING)


def lookup(table: Mapping[str, str], name: str) -> str | None:
    """The entry of ``table`` for agent ``name``: its exact name, else its role word, else None."""
    if name in table:
        return table[name]
    role = role_word(name)
    return next((v for k, v in table.items() if k.replace("_", " ") == role), None)


def check_keys(kinds: Mapping[str, str], role_prompts: Mapping[str, str], world: World) -> None:
    """Refuse a ``team.agents`` or ``team.llm.role_prompts`` key naming no agent and no role of ``world``."""
    for table, what in ((kinds, "team.agents"), (role_prompts, "team.llm.role_prompts")):
        for key in table:
            if key != "default" and not any(lookup({key: ""}, name) is not None for name in world.agents):
                roles = sorted({role_word(n).replace(" ", "_") for n in world.agents})
                raise TeamTRError(f"{what}.{key}: {world.name} has no agent or role {key!r}; agents: "
                                  f"{', '.join(world.agents)}; roles: {', '.join(roles)}.")


class MixedTeam:
    """Builds each world agent's role agent (a ``team.AgentFactory``).

    Args:
        kinds: agent name / role word / ``default`` -> kind (see the module docstring).
        resolvers: kind -> the resolver its agents share (``llm``, ``remote``: those the kinds use).
        role_prompts: agent name / role word -> role prompt (default: from the name).
    """

    def __init__(self, kinds: Mapping[str, str], resolvers: Mapping[str, Resolver],
                 role_prompts: Mapping[str, str] | None = None) -> None:
        unknown = {k: v for k, v in kinds.items() if v not in KINDS}
        if unknown:
            key, kind = next(iter(unknown.items()))
            raise TeamTRError(f"team.agents.{key}: unknown agent kind {kind!r}; kinds: {', '.join(KINDS)}.")
        missing = sorted({v for v in kinds.values() if v in CHOOSING and v not in resolvers})
        if missing:
            raise TeamTRError(f"team.agents uses {missing} agents but no model was given for them.")
        self.kinds = dict(kinds)
        self.resolvers = dict(resolvers)
        self.role_prompts = dict(role_prompts or {})

    def check(self, world: World) -> None:
        check_keys(self.kinds, self.role_prompts, world)

    def kind(self, name: str) -> str:
        return lookup(self.kinds, name) or self.kinds.get("default", "scripted")

    def __call__(self, world: World, name: str) -> ScriptedAgent:
        kind = self.kind(name)
        if kind == "scripted":
            return ScriptedAgent(name, float(getattr(world, "compliance", 1.0)))
        return CHOOSING[kind](name, self.resolvers[kind], lookup(self.role_prompts, name))  # type: ignore[arg-type]
