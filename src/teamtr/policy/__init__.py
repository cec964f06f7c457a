"""The coordinator model. Torch loads only when a model class is first used (PEP 562), so
``teamtr.policy.settings`` stays importable without torch."""

from __future__ import annotations

from typing import Any

from teamtr.policy.settings import NORMALIZATIONS, LoraSettings

_LAZY = {"Coordinator": "teamtr.policy.coordinator", "CoordinatorLike": "teamtr.policy.coordinator",
         "ActOutput": "teamtr.policy.coordinator"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'teamtr.policy' has no attribute {name!r}")


__all__ = ["NORMALIZATIONS", "ActOutput", "Coordinator", "CoordinatorLike", "LoraSettings"]
