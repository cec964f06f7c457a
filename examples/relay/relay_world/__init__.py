"""An example TeamTR world from outside the package (see ../README.md)."""

from relay_world.world import RelayWorld

__all__ = ["RelayWorld"]
