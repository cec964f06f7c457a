"""Worlds: the registry (built-in names, ``teamtr.worlds`` entry points, "module:Class" paths) and the
built-in worlds (escape-room, software-team, overcooked, spread)."""

from teamtr.envs.registry import (
    WorldSpec,
    available,
    info,
    make,
    names,
    options,
    register,
    spec,
    world_class,
)

__all__ = ["WorldSpec", "available", "info", "make", "names", "options", "register", "spec", "world_class"]
