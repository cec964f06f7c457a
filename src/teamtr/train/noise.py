"""Exploration noise on directives (the seed's remedy for an early plateau): with probability
``policy.noise`` the chosen directive has one entity swapped for another valid one of the same kind.

The *entities* of a directive are its addressee (``target``) and its object (the part of ``task``
after the verb: "fetch:map" -> "map"). A swap keeps the kind and changes exactly one of them: the same
agent with another object of the same verb ("agent_A: fetch the key" -> "agent_A: fetch the map"), or
the same task for another agent ("agent_A: fetch the key" -> "agent_B: fetch the key"). Only candidates
of the state are swapped in, so the executed directive is always valid; the no-op has no entity and is
never swapped. The collector stores the executed candidate's index, so PPO's ratio uses the executed
directive's probability under the acting policy (its full candidate distribution is stored anyway).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from teamtr.core import Directive


def _verb(directive: Directive) -> str:
    return directive.task.partition(":")[0]


def neighbours(candidates: Sequence[Directive], index: int) -> list[int]:
    """Indices of the candidates that differ from ``candidates[index]`` in exactly one entity (see the
    module docstring), in candidate order; empty for the no-op."""
    chosen = candidates[index]
    if chosen.kind == "noop":
        return []
    out = []
    for j, other in enumerate(candidates):
        if j == index or other.kind != chosen.kind:
            continue
        same_agent = other.target == chosen.target and _verb(other) == _verb(chosen) and other.task != chosen.task
        same_task = other.task == chosen.task and other.target != chosen.target
        if same_agent or same_task:
            out.append(j)
    return out


def perturb(candidates: Sequence[Directive], index: int, noise: float, generator: torch.Generator) -> int:
    """The candidate index to execute: ``index``, or with probability ``noise`` a uniformly drawn
    neighbour of it (``index`` when it has none). ``noise`` = 0 draws nothing from ``generator``, so
    a run without noise samples exactly as before."""
    if noise <= 0:
        return index
    swap = float(torch.rand((), generator=generator)) < noise
    options = neighbours(candidates, index) if swap else []
    if not options:
        return index
    return options[int(torch.randint(len(options), (), generator=generator))]
