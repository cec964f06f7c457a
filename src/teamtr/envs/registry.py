"""The world registry: ``make(name, **options)``, ``names()``, ``info(name)``, ``options(name)``.

A world is named in one of three ways, everywhere a world name is taken (``env.name``, ``--env``):

- a registered name (``escape-room``): the built-in worlds and those given to ``register()``;
- an installed package's entry point in the ``teamtr.worlds`` group (``relay = relay_world:RelayWorld``
  in its ``pyproject.toml``), listed by ``names()`` without importing it;
- a ``"module:Class"`` path (``relay_world.world:RelayWorld``), imported when used.

Worlds are imported only when made, so a world whose optional extra (overcooked, mpe2) is not
installed, or a plug-in that fails to import, is still listed, and using it says what to do.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any

from teamtr.core import TeamTRError, World

ENTRY_POINT_GROUP = "teamtr.worlds"


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
#: World classes already imported and checked, by the name they were asked for.
_CLASSES: dict[str, type] = {}


def _first_line(cls: type) -> str:
    return (inspect.getdoc(cls) or "").strip().split("\n", 1)[0]


def register(world: WorldSpec | type) -> WorldSpec:
    """Add (or replace) a world: a ``WorldSpec``, or a World class (registered under its ``name``
    attribute, described by the first line of its docstring)."""
    if isinstance(world, WorldSpec):
        _CLASSES.pop(world.name, None)
        _REGISTRY[world.name] = world
        return world
    name = getattr(world, "name", None)
    if not isinstance(name, str) or not name:
        raise TeamTRError(f"register({world!r}): a world class needs a `name` class attribute (a string).")
    check_world_class(world, name)
    found = WorldSpec(name, f"{world.__module__}:{world.__qualname__}", _first_line(world))
    _REGISTRY[name], _CLASSES[name] = found, world
    return found


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


def _entry_points() -> dict[str, str]:
    """Entry-point name -> ``"module:Class"`` of the installed ``teamtr.worlds`` plug-ins."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """Registered world names in registration order, then installed plug-ins' entry-point names."""
    return [*_REGISTRY, *(name for name in _entry_points() if name not in _REGISTRY)]


def _find(name: str) -> WorldSpec:
    """The spec of ``name`` without importing the world (an entry point or path: no description)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    plugins = _entry_points()
    if name in plugins:
        return WorldSpec(name, plugins[name], "")
    if ":" in name:
        return WorldSpec(name, name, "")
    raise TeamTRError(
        f"Unknown world {name!r}; known worlds: {', '.join(names())}; or give a \"module:Class\" path."
    )


def spec(name: str) -> WorldSpec:
    """The spec of a registered name, an entry point or a ``"module:Class"`` path.

    A plug-in or path is imported and checked here (its description is its class docstring's first
    line), so a typo fails at once; an unknown name lists the known ones.
    """
    found = _find(name)
    if found.description:
        return found
    return WorldSpec(found.name, found.target, _first_line(world_class(name)))


def available(name: str) -> bool:
    """True when the world's optional extra is importable (always True without an extra)."""
    found = spec(name)
    if found.requires is None:
        return True
    return importlib.util.find_spec(found.requires) is not None


def info(name: str) -> str:
    """One line: the description, and the extra to install when it is missing. A plug-in that
    cannot be imported says why instead of failing the listing."""
    try:
        found = spec(name)
        line = found.description
    except TeamTRError as err:
        return f"cannot be loaded: {err}"
    if found.extra:
        state = "installed" if available(name) else f"needs {found.install_hint()}"
        line += f" [extra {found.extra}: {state}]"
    return line


def world_class(name: str) -> type:
    """The World class of ``name`` (registered name, entry point or path), imported and checked."""
    if name not in _CLASSES:
        _CLASSES[name] = _load(_find(name))
    return _CLASSES[name]


def _import_error(found: WorldSpec, err: ImportError) -> TeamTRError:
    if found.extra:
        return TeamTRError(
            f"World {found.name!r} needs the {found.extra!r} extra ({err.name or err} is "
            f"missing): run {found.install_hint()}."
        )
    return TeamTRError(
        f"World {found.name!r}: cannot import module {found.target.partition(':')[0]!r} ({err}); "
        "check the path (\"module:Class\") and that the module's folder is installed or on PYTHONPATH."
    )


def _load(found: WorldSpec) -> type:
    module_name, colon, cls_name = found.target.partition(":")
    if not (colon and module_name and cls_name):
        raise TeamTRError(f"World {found.name!r}: {found.target!r} is not a \"module:Class\" path.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise _import_error(found, err) from None
    cls: Any = module
    for part in cls_name.split("."):
        cls = getattr(cls, part, None)
        if cls is None:
            raise TeamTRError(
                f"World {found.name!r}: module {module_name!r} has no class {cls_name!r}; "
                f"check the name after the colon in {found.target!r}."
            )
    check_world_class(cls, found.target)
    return cls


def _world_members() -> list[str]:
    """What ``core.World`` asks of a world class: its class attributes and methods (``agents`` and
    ``task`` depend on the options, so they are set per instance and not looked for)."""
    methods = [k for k, v in vars(World).items() if callable(v) and not k.startswith("_")]
    return [*(a for a in World.__annotations__ if a not in ("agents", "task")), *methods]


def check_world_class(cls: Any, where: str) -> None:
    """Refuse what is not a World class, naming what it lacks."""
    if not inspect.isclass(cls):
        raise TeamTRError(f"World {where!r} is {type(cls).__name__} {cls!r}, not a class.")
    missing = [m for m in _world_members() if not hasattr(cls, m)]
    if missing:
        raise TeamTRError(
            f"World {where!r}: class {cls.__name__} does not look like a teamtr World; it lacks "
            f"{', '.join(missing)} (see teamtr.core.World)."
        )


def options(name: str) -> dict[str, Any]:
    """The world's constructor options and their defaults (``inspect.Parameter.empty`` when an
    option has none), in signature order."""
    params = inspect.signature(world_class(name)).parameters.values()
    return {p.name: p.default for p in params
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def make(name: str, **options_: Any) -> World:
    """Build world ``name`` with ``options_``; an unknown option names the allowed ones."""
    cls = world_class(name)
    allowed = list(options(name))
    unknown = [key for key in options_ if key not in allowed]
    if unknown:
        raise TeamTRError(
            f"World {name!r} has no option {unknown[0]!r}; allowed options: {', '.join(allowed)}."
        )
    return cls(**options_)


# -- option checks shared by the worlds (errors name the key, the bad value and what is allowed) --
def check_int(world: str, key: str, value: Any, low: int, high: int, allowed: str = "") -> int:
    """``value`` must be an int in ``low..high``."""
    allowed = allowed or f"{low}..{high}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TeamTRError(f"{world}: option {key}={value!r} is not an integer; allowed: {allowed}.")
    if not low <= value <= high:
        raise TeamTRError(f"{world}: option {key}={value!r} is out of range; allowed: {allowed}.")
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
