"""Worlds: the registry and the built-in text worlds (escape-room, software-team)."""

from teamtr.envs.registry import WorldSpec, available, info, make, names, register, spec

__all__ = ["WorldSpec", "available", "info", "make", "names", "register", "spec"]
