"""The world registry: ``make(name, **options)``, ``names()``, ``info(name)``.

Worlds are registered by import path and imported only when made, so a world whose optional extra
(overcooked, mpe2) is not installed is still listed, and making it says which ``pip install`` to run.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any

from teamtr.core import TeamTRError, World


@dataclass(frozen=True)
class WorldSpec:
    """A registered world: ``target`` is ``"module:Class"``; ``extra`` the pip extra it needs."""

    name: str
    target: str
    description: str
    extra: str | None = None
    requires: str | None = None  # the third-party module the extra provides

    def install_hint(self) -> str:
        return f"pip install 'teamtr[{self.extra}]'" if self.extra else ""


_REGISTRY: dict[str, WorldSpec] = {}


def register(spec: WorldSpec) -> None:
    """Add (or replace) a world in the registry."""
    _REGISTRY[spec.name] = spec


register(WorldSpec(
    "escape-room", "teamtr.envs.escape_room:EscapeRoomWorld",
    "agents bring items out of rooms only one of them may enter, then open the door",
))
register(WorldSpec(
    "software-team", "teamtr.envs.software_team:SoftwareTeamWorld",
    "a simulated software company: PRD, design, modules, integration, tests, release by a deadline",
))
register(WorldSpec(
    "overcooked", "teamtr.envs.overcooked:OvercookedWorld",
    "Overcooked-AI: two cooks share a kitchen and must hand off onions, dishes and soups",
    extra="overcooked", requires="overcooked",
))
register(WorldSpec(
    "spread", "teamtr.envs.spread:SpreadWorld",
    "MPE simple-spread: agents must cover every landmark without colliding",
    extra="mpe", requires="mpe2",
))


def names() -> list[str]:
    """Registered world names, in registration order."""
    return list(_REGISTRY)


def spec(name: str) -> WorldSpec:
    """The registered spec of ``name``; an unknown name lists the known ones."""
    if name not in _REGISTRY:
        raise TeamTRError(f"Unknown world {name!r}; known worlds: {', '.join(_REGISTRY)}.")
    return _REGISTRY[name]


def available(name: str) -> bool:
    """True when the world's optional extra is importable (always True without an extra)."""
    found = spec(name)
    if found.requires is None:
        return True
    return importlib.util.find_spec(found.requires) is not None


def info(name: str) -> str:
    """One line: the description, and the extra to install when it is missing."""
    found = spec(name)
    line = found.description
    if found.extra:
        state = "installed" if available(name) else f"needs {found.install_hint()}"
        line += f" [extra {found.extra}: {state}]"
    return line


def _load(found: WorldSpec) -> type:
    module_name, _, cls = found.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        if found.extra:
            raise TeamTRError(
                f"World {found.name!r} needs the {found.extra!r} extra ({err.name or err} is "
                f"missing): run {found.install_hint()}."
            ) from None
        raise
    return getattr(module, cls)


def make(name: str, **options: Any) -> World:
    """Build world ``name`` with ``options``; an unknown option names the allowed ones."""
    cls = _load(spec(name))
    allowed = [p for p in inspect.signature(cls).parameters if p not in ("self",)]
    unknown = [key for key in options if key not in allowed]
    if unknown:
        raise TeamTRError(
            f"World {name!r} has no option {unknown[0]!r}; allowed options: {', '.join(allowed)}."
        )
    return cls(**options)


# -- option checks shared by the worlds (errors name the key, the bad value and what is allowed) --
def check_int(world: str, key: str, value: Any, low: int, high: int, allowed: str = "") -> int:
    """``value`` must be an int in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TeamTRError(
            f"{world}: option {key}={value!r} is out of range; allowed: {allowed or f'{low}..{high}'}."
        )
    return value


def check_float(world: str, key: str, value: Any, low: float, high: float) -> float:
    """``value`` must be a number in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise TeamTRError(f"{world}: option {key}={value!r} is out of range; allowed: {low}..{high}.")
    return float(value)


def check_choice(world: str, key: str, value: Any, allowed: tuple[str, ...]) -> str:
    """``value`` must be one of ``allowed``."""
    if value not in allowed:
        raise TeamTRError(f"{world}: option {key}={value!r} is not allowed; allowed: {', '.join(allowed)}.")
    return value
