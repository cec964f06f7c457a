"""Replay of successes (the seed's remedy for meaningless or repeated instructions): a buffer of the
decisions of successful training episodes, prioritised by return, imitated in every PPO step.

``SuccessReplay`` keeps the ``capacity`` successful episodes of highest return (a newer episode
replaces an older one only with a strictly higher return). Sampling is rank-based (Schaul et al.,
2016): the episode of rank r (1 = highest return) is drawn with probability proportional to
``r ** -alpha`` (``alpha`` = 0: uniform), then one of its decisions uniformly. Ranks, not returns,
make the priority indifferent to the reward's scale and sign.

``ReplayTerm`` is the auxiliary loss PPO adds at every optimiser step (``PPO.auxiliary``):
``replay_coef * NLL`` of the replayed decisions' executed candidates under the current policy
(``rl.losses.imitation_nll``). The buffer and its generator are saved in the trainer's checkpoint
state, so a resumed run samples exactly what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from teamtr.core import Directive, TeamTRError
from teamtr.policy.coordinator import CoordinatorLike
from teamtr.rl.losses import imitation_nll, masked_log_softmax
from teamtr.team import TeamState

Decision = tuple[TeamState, int]  # a state and the index of the candidate executed in it


class SuccessReplay:
    """Successful episodes' decisions, highest return first (see the module docstring)."""

    def __init__(self, capacity: int, alpha: float, seed: int = 0) -> None:
        if capacity < 1 or alpha < 0:
            raise TeamTRError(f"replay capacity={capacity}, alpha={alpha}: capacity must be >= 1 and alpha >= 0 "
                              "(algo.replay_capacity, algo.replay_alpha).")
        self.capacity, self.alpha = capacity, alpha
        self.episodes: list[tuple[float, list[Decision]]] = []  # sorted by return, descending
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        """The number of decisions held."""
        return sum(len(d) for _, d in self.episodes)

    def add(self, ret: float, decisions: Sequence[Decision]) -> None:
        """Keep one successful episode of return ``ret``, if it ranks among the ``capacity`` best."""
        if not decisions:
            return
        at = next((i for i, (r, _) in enumerate(self.episodes) if r < ret), len(self.episodes))
        self.episodes.insert(at, (float(ret), list(decisions)))
        del self.episodes[self.capacity:]

    def probabilities(self) -> torch.Tensor:
        """[E] the sampling probability of each held episode, in rank order."""
        ranks = torch.arange(1, len(self.episodes) + 1, dtype=torch.float64)
        p = ranks ** -self.alpha
        return p / p.sum()

    def sample(self, n: int) -> list[Decision]:
        """``n`` decisions: an episode by rank priority, then one of its decisions uniformly."""
        if not self.episodes:
            raise TeamTRError("the replay buffer is empty; sample only once a successful episode was added.")
        picks = torch.multinomial(self.probabilities(), n, replacement=True, generator=self.generator)
        out = []
        for e in picks.tolist():
            decisions = self.episodes[e][1]
            out.append(decisions[int(torch.randint(len(decisions), (), generator=self.generator))])
        return out

    def state_dict(self) -> dict[str, Any]:
        """Plain data (JSON and one tensor) for the checkpoint."""
        return {"episodes": [[r, [[dataclasses.asdict(s), a] for s, a in d]] for r, d in self.episodes],
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes = [(float(r), [(_state(s), int(a)) for s, a in d]) for r, d in state["episodes"]]
        self.generator.set_state(state["generator"])


def _state(data: dict[str, Any]) -> TeamState:
    return TeamState(**{**data, "history": tuple(data["history"]), "expert_lines": tuple(data.get("expert_lines", ())),
                        "candidates": tuple(Directive(**c) for c in data["candidates"])})


class ReplayTerm:
    """``coef * NLL`` of ``batch`` replayed decisions under ``coordinator`` (with gradients): the
    auxiliary loss of each PPO step, and its metrics (``loss/replay``: the NLL itself)."""

    def __init__(self, coordinator: CoordinatorLike, replay: SuccessReplay, coef: float, batch: int) -> None:
        self.coordinator, self.replay, self.coef, self.batch = coordinator, replay, coef, batch

    def __call__(self) -> tuple[torch.Tensor, dict[str, float]]:
        if not self.replay.episodes:
            return torch.zeros(()), {}
        states, actions = zip(*self.replay.sample(self.batch))
        handles = self.coordinator.remember(list(states))
        scores, _ = self.coordinator.evaluate(handles)
        mask = self.coordinator.stored_mask(handles).to(scores.device)
        nll = imitation_nll(masked_log_softmax(scores, mask), torch.tensor(actions, device=scores.device))
        return self.coef * nll, {"loss/replay": float(nll.detach())}
