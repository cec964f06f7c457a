"""Every evaluation policy, and ``build_policies``, the one factory the CLI and the trainer use.

A policy is anything with ``choose(states: list[TeamState]) -> list[int]``: one candidate index per
state, batched so that an LLM coordinator scores all live states in one call.

- baselines (no model): ``random``, ``first``, ``noop``, ``oracle``;
- the coordinator: ``trained`` (adapter merged in for speed, ``MergedPolicy``) and ``zero-shot`` (the
  adapter switched off: the base model, ``ZeroShotPolicy``); ``CoordinatorPolicy`` is the plain one.

Torch loads only when a coordinator policy is built.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ContextManager, Protocol

from teamtr.core import TeamTRError
from teamtr.team import TeamState

if TYPE_CHECKING:
    from teamtr.policy.coordinator import CoordinatorLike


class Policy(Protocol):
    """A coordinator: picks one candidate index per state."""

    def choose(self, states: list[TeamState]) -> list[int]: ...


class RandomPolicy:
    """Uniform over the candidates (no-op included), from its own seeded generator."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def choose(self, states: list[TeamState]) -> list[int]:
        return [self.rng.randrange(len(state.candidates)) for state in states]


class FirstPolicy:
    """Always the first candidate: a coordinator stuck on one habit."""

    def choose(self, states: list[TeamState]) -> list[int]:
        return [0 for _ in states]


class NoopPolicy:
    """Always "no new directive" (the last candidate): a team left alone."""

    def choose(self, states: list[TeamState]) -> list[int]:
        return [len(state.candidates) - 1 for state in states]


class OraclePolicy:
    """The world's expert directive (``TeamState.expert``): the upper bound and the demonstrator."""

    def choose(self, states: list[TeamState]) -> list[int]:
        return [state.expert for state in states]


class CoordinatorPolicy:
    """The coordinator as an evaluation policy (greedy by default), in chunks of ``batch`` decisions."""

    # 16 decisions per call: on a 2-core CPU larger batches pad more and ran 20-25% slower per decision.
    def __init__(self, coordinator: CoordinatorLike, greedy: bool = True, batch: int = 16, seed: int = 0) -> None:
        import torch

        self.coordinator, self.greedy, self.batch = coordinator, greedy, batch
        self.generator = torch.Generator().manual_seed(seed)

    def choose(self, states: list[TeamState]) -> list[int]:
        """One candidate per state; ``last_probs`` keeps the candidates' probabilities (for transcripts)."""
        out: list[int] = []
        self.last_probs: list[list[float]] = []
        for s in range(0, len(states), self.batch):
            chunk = states[s : s + self.batch]
            acted = self.coordinator.act(chunk, greedy=self.greedy, generator=self.generator)
            out += acted.choices
            self.last_probs += [acted.logp[k, : len(st.candidates)].exp().tolist() for k, st in enumerate(chunk)]
        return out


class WholeTeamPolicy(CoordinatorPolicy):
    """The coordinator writing whole-team directives (``team.directives: whole_team``): per state the
    candidate indices of its new lines, which ``Team.step`` takes as one decision."""

    def choose(self, states: list[TeamState]) -> list[list[int]]:  # type: ignore[override]
        from teamtr.policy.whole_team import act_whole_team

        out: list[list[int]] = []
        for s in range(0, len(states), self.batch):
            out += act_whole_team(self.coordinator, states[s : s + self.batch], greedy=self.greedy,  # type: ignore[arg-type]
                                  generator=self.generator).lines
        return out


class MergedPolicy(CoordinatorPolicy):
    """Evaluation with the adapter merged into the weights: ``evaluate_table`` enters ``session()``
    once around all of this policy's episodes, so the merge is paid (and rounded) once, not per tick."""

    def session(self) -> ContextManager[None]:
        return self.coordinator.merged()


class ZeroShotPolicy(CoordinatorPolicy):
    """The coordinator with its adapter switched off: the base model, zero-shot."""

    def choose(self, states: list[TeamState]) -> list[int]:
        with self.coordinator.disable_adapter():
            return super().choose(states)


BASELINES: dict[str, Callable[[int], Policy]] = {
    "random": RandomPolicy, "first": lambda _: FirstPolicy(), "noop": lambda _: NoopPolicy(),
    "oracle": lambda _: OraclePolicy()}
COORDINATOR_POLICIES = ("trained", "zero-shot")
POLICIES = (*BASELINES, *COORDINATOR_POLICIES)


def baseline(name: str, seed: int = 0) -> Policy:
    """The baseline policy ``name``; ``seed`` seeds ``random``."""
    if name not in BASELINES:
        raise TeamTRError(f"Unknown policy {name!r}; baselines: {', '.join(BASELINES)}.")
    return BASELINES[name](seed)


def build_policies(names: Sequence[str], *, seed: int = 0,
                   coordinator: CoordinatorLike | Callable[[], CoordinatorLike] | None = None,
                   trained: bool = True) -> dict[str, Policy]:
    """Name -> policy for each of ``names`` (``POLICIES``). ``coordinator``: the coordinator, or a
    function building it (called once, only when a coordinator policy is asked for); ``trained``:
    whether it holds trained weights (``trained`` is refused otherwise). ``seed`` seeds ``random``."""
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise TeamTRError(f"Unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}.")
    if "trained" in names and not trained:
        raise TeamTRError("policy 'trained' needs trained weights: pass --checkpoint RUN_DIR (or a checkpoint folder).")
    built: list[Any] = []

    def model() -> CoordinatorLike:
        if coordinator is None:
            raise TeamTRError(f"policies {', '.join(COORDINATOR_POLICIES)} need a coordinator; none was given.")
        if not built:
            built.append(coordinator() if callable(coordinator) and not hasattr(coordinator, "act") else coordinator)
        return built[0]

    out: dict[str, Policy] = {}
    for name in names:
        if name == "trained":
            out[name] = MergedPolicy(model())
        elif name == "zero-shot":
            out[name] = ZeroShotPolicy(model())
        else:
            out[name] = baseline(name, seed)
    return out

