"""Every evaluation policy, and ``build_policies``, the one factory the CLI and the trainer use.

A policy is anything with ``choose(states: list[TeamState]) -> list[int]``: one candidate index per
state, batched so that an LLM coordinator scores all live states in one call (a coordinator policy
in whole-team or free-text mode returns what ``Team.step`` takes in that mode instead).

- baselines (no model): ``random``, ``first``, ``noop``, ``oracle`` (the world's expert, also called
  ``heuristic``: tables use the world's word, ``expert_name``);
- the coordinator: ``trained`` (adapter merged in for speed, ``MergedPolicy``) and ``zero-shot`` (the
  adapter switched off: the base model, ``ZeroShotPolicy``); ``CoordinatorPolicy`` is the plain one;
  the end-of-run table's ``bc`` row is ``ClonedPolicy`` (the behaviour-cloned adapter before RL);
  a hierarchical coordinator (``team.hierarchy``) evaluates as ``HierarchicalPolicy``.

Torch loads only when a coordinator policy is built.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ContextManager, Protocol

from teamtr.config import DIRECTIVE_MODES
from teamtr.core import TeamTRError
from teamtr.team import FreeText, TeamState

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
    """The world's expert directive (``TeamState.expert``): the upper bound and the demonstrator. With
    ``directives`` whole_team or free_text, the whole-team oracle's lines (``TeamState.expert_lines``),
    all delivered in one decision, as a coordinator in those modes may."""

    lines = False  # single mode; a subclass that does not call __init__ keeps the one-directive oracle

    def __init__(self, directives: str = "single") -> None:
        self.lines = directives != "single"

    def choose(self, states: list[TeamState]) -> list[Any]:
        return [list(state.expert_lines) if self.lines else state.expert for state in states]


def decision_key(state: TeamState) -> tuple[str, str, tuple[str, ...], tuple[str, ...], str]:
    """Everything the coordinator reads of a state: ``policy.prompts`` builds the prompt from the
    task, the state text, the history, the goal and the candidates' texts alone, so equal keys score
    equally."""
    return state.task, state.state, tuple(state.history), tuple(c.text for c in state.candidates), state.goal


class CoordinatorPolicy:
    """The coordinator as an evaluation policy (greedy by default), in chunks of ``batch`` decisions.

    ``directives`` (``team.directives``): ``single`` chooses one candidate index per state; ``whole_team``
    gives the candidate indices of the lines of its decoded whole-team directive; ``free_text`` a
    ``team.FreeText`` (the text written, at most ``max_new_tokens`` tokens, and its parsed lines).

    Greedy choices are memoised per ``decision_key`` for the policy's life (the weights must not change
    meanwhile: build a new policy after an update): held-out episodes revisit the same prompts (escape-
    room's oracle-like play: 634 distinct prompts in 1,800 decisions over 200 seeds; a stuck zero-shot
    coordinator repeats itself), and each distinct prompt is scored once, in the first batch it appears
    in. The result is the model's greedy choice for that prompt, as without the memo; sampling policies
    (``greedy=False``) draw afresh every time and memoise nothing.
    """

    # 16 decisions per call: on a 2-core CPU larger batches pad more and ran 20-25% slower per decision.
    def __init__(self, coordinator: CoordinatorLike, greedy: bool = True, batch: int = 16, seed: int = 0,
                 directives: str = "single", max_new_tokens: int = 48) -> None:
        import torch

        if directives not in DIRECTIVE_MODES:
            raise TeamTRError(f"directives {directives!r} is not one of {', '.join(DIRECTIVE_MODES)}.")
        self.coordinator, self.greedy, self.batch = coordinator, greedy, batch
        self.directives, self.max_new_tokens = directives, max_new_tokens
        self.generator = torch.Generator().manual_seed(seed)
        self.memo: dict[tuple[Any, ...], tuple[Any, list[float] | None]] = {}
        self.scored = 0  # decisions sent to the model (the rest came from the memo)

    def choose(self, states: list[TeamState]) -> list[Any]:
        """One choice per state; ``last_probs`` keeps the candidates' probabilities (for transcripts;
        None per state outside single mode)."""
        if not self.greedy:
            choices, self.last_probs = self._score(states)
            return choices
        keys = [decision_key(state) for state in states]
        todo = {key: state for key, state in zip(keys, states) if key not in self.memo}  # ordered, unique
        if todo:
            choices, probs = self._score(list(todo.values()))
            self.memo.update(zip(todo, zip(choices, probs)))
        self.last_probs = [self.memo[key][1] for key in keys]
        return [self.memo[key][0] for key in keys]

    def _weights(self) -> ContextManager[None]:
        """The weights the policy scores with (``ZeroShotPolicy``: the adapter off)."""
        return contextlib.nullcontext()

    def _score(self, states: list[TeamState]) -> tuple[list[Any], list[list[float] | None]]:
        """The model's choice (and candidate probabilities) for each state, ``batch`` states a call."""
        out: list[Any] = []
        probs: list[list[float] | None] = []
        with self._weights():
            for s in range(0, len(states), self.batch):
                chosen, chunk_probs = self._act(states[s : s + self.batch])
                out += chosen
                probs += chunk_probs
        self.scored += len(states)
        return out, probs

    def _act(self, chunk: list[TeamState]) -> tuple[list[Any], list[list[float] | None]]:
        """One model call's choices and candidate probabilities (None outside single mode)."""
        none: list[list[float] | None] = [None] * len(chunk)
        if self.directives == "whole_team":
            from teamtr.policy.whole_team import act_whole_team

            return act_whole_team(self.coordinator, chunk, greedy=self.greedy,  # type: ignore[arg-type]
                                  generator=self.generator).lines, none
        if self.directives == "free_text":
            from teamtr.policy.free_text import act_free_text

            out = act_free_text(self.coordinator, chunk, max_new_tokens=self.max_new_tokens,  # type: ignore[arg-type]
                                greedy=self.greedy, generator=self.generator)
            return [FreeText(t, None if ls is None else tuple(ls)) for t, ls in zip(out.texts, out.lines)], none
        acted = self.coordinator.act(chunk, greedy=self.greedy, generator=self.generator)
        return acted.choices, [acted.logp[k, : len(st.candidates)].exp().tolist() for k, st in enumerate(chunk)]


class WholeTeamPolicy(CoordinatorPolicy):
    """The coordinator writing whole-team directives (``team.directives: whole_team``): per state the
    candidate indices of its new lines, which ``Team.step`` takes as one decision."""

    def __init__(self, coordinator: CoordinatorLike, greedy: bool = True, batch: int = 16, seed: int = 0) -> None:
        super().__init__(coordinator, greedy, batch, seed, directives="whole_team")


def assign_goals(coordinator: CoordinatorLike, teams: Sequence[Any], schedule: Any, *, greedy: bool,
                 generator: Any = None, keep: bool = False) -> tuple[list[int], list[TeamState], Any]:
    """The strategic level's turn (``team.hierarchy``): every team of ``teams`` whose goal is due
    (``schedule.due``) gets the goal its strategic adapter chooses, all scored in one call. Returns the
    due teams' indices, their strategic states and the ``ActOutput`` (None when no goal was due)."""
    from teamtr.hierarchy import goal_state
    from teamtr.policy.levels import use_level

    due = [k for k, team in enumerate(teams) if schedule.due(team)]
    if not due:
        return [], [], None
    states = [goal_state(teams[k]) for k in due]
    with use_level(coordinator, "strategic"):
        out = coordinator.act(states, greedy=greedy, generator=generator, keep=keep)
    for k, state, choice in zip(due, states, out.choices):
        teams[k].set_goal(state.candidates[choice])
    return due, states, out


class HierarchicalPolicy(CoordinatorPolicy):
    """A hierarchical coordinator (``team.hierarchy``): before each round ``plan(teams)`` lets the
    strategic adapter set the goal of every team whose goal is due; ``choose`` is the tactical
    adapter's, the goal in its prompt (and in its memo key). ``base``: both adapters off (zero-shot);
    ``state``: other weights for both adapters over all the episodes (``read_adapter`` plus
    ``read_levels`` of a snapshot: the end-of-run table's ``bc`` row)."""

    def __init__(self, coordinator: CoordinatorLike, schedule: Any, greedy: bool = True, batch: int = 16,
                 seed: int = 0, base: bool = False, state: dict[str, Any] | None = None) -> None:
        super().__init__(coordinator, greedy=greedy, batch=batch, seed=seed)
        self.schedule, self.base, self.state = schedule, base, state
        self.goals_set = 0  # strategic decisions made

    def session(self) -> ContextManager[None]:
        return self.coordinator.use_adapter(self.state) if self.state else contextlib.nullcontext()

    def _off(self) -> ContextManager[None]:
        return self.coordinator.disable_adapter() if self.base else contextlib.nullcontext()

    def plan(self, teams: Sequence[Any]) -> None:
        with self._off():
            due, _, _ = assign_goals(self.coordinator, teams, self.schedule, greedy=self.greedy,
                                     generator=self.generator)
        self.goals_set += len(due)

    def _score(self, states: list[TeamState]) -> tuple[list[int], list[list[float]]]:
        with self._off():
            return super()._score(states)


class MergedPolicy(CoordinatorPolicy):
    """Evaluation with the adapter merged into the weights: ``evaluate_table`` enters ``session()``
    once around all of this policy's episodes, so the merge is paid (and rounded) once, not per tick."""

    def session(self) -> ContextManager[None]:
        return self.coordinator.merged()


class ClonedPolicy(MergedPolicy):
    """The coordinator with another adapter's weights in place of its own for the whole evaluation
    (``state``: e.g. the behaviour-cloned snapshot ``RUN/bc``, read with ``read_adapter``): the end-of-run
    table's ``bc`` row, the warm-up alone, on the same weights in memory (merged like ``trained``)."""

    def __init__(self, coordinator: CoordinatorLike, state: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(coordinator, **kwargs)
        self.state = state

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        with self.coordinator.use_adapter(self.state), self.coordinator.merged():
            yield


class ZeroShotPolicy(CoordinatorPolicy):
    """The coordinator with its adapter switched off: the base model, zero-shot, on the same weights
    in memory (no second model). Inside ``session()`` the adapter stays off for all the episodes, so
    the shared prompt prefix's keys and values are computed once, not again every tick."""

    _off = False

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        with self.coordinator.disable_adapter():
            self._off = True
            try:
                yield
            finally:
                self._off = False

    def _weights(self) -> ContextManager[None]:
        return contextlib.nullcontext() if self._off else self.coordinator.disable_adapter()


#: The world's expert goes by the world's word for it: ``oracle`` (the default) or ``heuristic``
#: (a world whose expert is a hand-written rule says so with ``expert_name = "heuristic"``). Either
#: word builds ``OraclePolicy``; tables label its row with the world's word (``expert_name``).
EXPERT_NAMES = ("oracle", "heuristic")

BASELINES: dict[str, Callable[[int], Policy]] = {
    "random": RandomPolicy, "first": lambda _: FirstPolicy(), "noop": lambda _: NoopPolicy(),
    **{name: (lambda _: OraclePolicy()) for name in EXPERT_NAMES}}
COORDINATOR_POLICIES = ("trained", "zero-shot")
POLICIES = (*BASELINES, *COORDINATOR_POLICIES)


def expert_name(world: Any) -> str:
    """What ``world`` (a world or its class) calls its expert: ``oracle`` unless it declares
    ``expert_name`` (Overcooked's heuristic coordinator: ``heuristic``)."""
    name = str(getattr(world, "expert_name", "oracle"))
    if name not in EXPERT_NAMES:
        raise TeamTRError(f"{getattr(world, 'name', world)}: expert_name {name!r} is not one of {', '.join(EXPERT_NAMES)}.")
    return name


def baseline(name: str, seed: int = 0) -> Policy:
    """The baseline policy ``name``; ``seed`` seeds ``random``."""
    if name not in BASELINES:
        raise TeamTRError(f"Unknown policy {name!r}; baselines: {', '.join(BASELINES)}.")
    return BASELINES[name](seed)


def build_policies(names: Sequence[str], *, seed: int = 0,
                   coordinator: CoordinatorLike | Callable[[], CoordinatorLike] | None = None,
                   trained: bool = True, directives: str = "single", max_new_tokens: int = 48,
                   hierarchy: Any = None) -> dict[str, Policy]:
    """Name -> policy for each of ``names`` (``POLICIES``). ``coordinator``: the coordinator, or a
    function building it (called once, only when a coordinator policy is asked for); ``trained``:
    whether it holds trained weights (``trained`` is refused otherwise). ``seed`` seeds ``random``.
    ``directives``/``max_new_tokens``: how the coordinator policies direct (``team.directives``,
    ``policy.max_new_tokens``; see ``CoordinatorPolicy``; the oracle directs the whole team at once
    outside single mode, ``OraclePolicy``). ``hierarchy``: the config's
    ``team.hierarchy``; when enabled, ``trained`` and ``zero-shot`` are ``HierarchicalPolicy`` (the
    zero-shot one with both adapters off; single directives only)."""
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
    if hierarchy is not None and hierarchy.enabled:
        from teamtr.hierarchy import GoalSchedule

        schedule = GoalSchedule.from_config(hierarchy)
        for name in (n for n in names if n in COORDINATOR_POLICIES):
            out[name] = HierarchicalPolicy(model(), schedule, base=name == "zero-shot")
    for name in (n for n in names if n not in out):
        if name == "trained":
            out[name] = MergedPolicy(model(), directives=directives, max_new_tokens=max_new_tokens)
        elif name == "zero-shot":
            out[name] = ZeroShotPolicy(model(), directives=directives, max_new_tokens=max_new_tokens)
        elif name in EXPERT_NAMES:
            out[name] = OraclePolicy(directives)
        else:
            out[name] = baseline(name, seed)
    return out

