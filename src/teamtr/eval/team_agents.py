"""The role agents a config asks for (``team.agents``): the model wired into LLM and remote agents."""

from __future__ import annotations

from typing import Any

from collections.abc import Callable

from teamtr.agents.chooser import Resolver, role_word
from teamtr.agents.llm import LLMResolver
from teamtr.agents.mixed import MixedTeam, check_keys
from teamtr.agents.remote import RemoteResolver
from teamtr.config import Config
from teamtr.core import TeamTRError, World


def check_team(config: Config, world: World) -> None:
    """Fail before any model loads when ``team.agents`` or role prompts name no agent of ``world``."""
    check_keys(config.team.agents, config.team.llm.role_prompts, world)


def agent_factory(config: Config, coordinator: Any = None) -> MixedTeam | None:
    """The ``Team(make_agent=...)`` for ``config.team``; None for an all-scripted team (the default,
    with the world's ``compliance``). ``llm`` agents score with ``coordinator``'s backbone, adapter
    disabled (``team.llm.backbone: same``), or load ``team.llm.backbone`` once; with
    ``team.llm.role_adapters.enabled`` each scores with its role's adapter on that backbone."""
    from teamtr.policy.choices import ChoiceScorer

    team = config.team
    kinds = set(team.agents.values())
    if kinds <= {"scripted"}:
        return None
    resolvers: dict[str, Resolver] = {}
    if "llm" in kinds:
        if team.llm.backbone == "same":
            if coordinator is None:
                raise TeamTRError("team.llm.backbone 'same' needs a coordinator to share; name a model instead.")
            score = ChoiceScorer.of_coordinator(coordinator)
        else:
            m = config.model
            score = ChoiceScorer.of_backbone(team.llm.backbone, m.device, m.dtype, config.policy.normalization)
        resolvers["llm"] = LLMResolver(score, role_resolver(config, coordinator))
    if "remote" in kinds:
        resolvers["remote"] = RemoteResolver(**team.remote.model_dump())
    return MixedTeam(team.agents, resolvers, team.llm.role_prompts)


def role_resolver(config: Config, coordinator: Any) -> Callable[[str], str | None] | None:
    """Agent name -> its role (whose adapter scores it) when ``team.llm.role_adapters.enabled``;
    refuses a coordinator that carries no role adapters (a checkpoint trained without them)."""
    if not config.team.llm.role_adapters.enabled:
        return None
    if not coordinator.roles.names:
        raise TeamTRError("team.llm.role_adapters.enabled is true but the coordinator carries no role adapters: "
                          "load a checkpoint trained with them (teamtr train tunes them first), or set "
                          "team.llm.role_adapters.enabled=false.")

    def role(agent: str) -> str:
        coordinator.roles.name_of(role_word(agent))  # an unknown role fails here, naming the carried ones
        return role_word(agent)

    return role
