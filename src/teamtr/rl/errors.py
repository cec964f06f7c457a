"""The error ``teamtr.rl`` raises for bad tensors or settings (torch-free, so settings can use it)."""

from __future__ import annotations

from teamtr.core import TeamTRError


class RLInputError(TeamTRError, ValueError):
    """Bad tensors or settings handed to ``teamtr.rl``; the message names what and what is allowed."""
