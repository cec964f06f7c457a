"""Gymnasium ids for the text worlds: ``teamtr/EscapeRoom-v0`` and ``teamtr/SoftwareTeam-v0``.

The observation is the coordinator's prompt as text (task, state, recent history); the action is a
candidate index. Candidates change from state to state: ``info["candidates"]`` lists this state's
directive texts, ``action_space`` is ``Discrete(len(candidates))`` of the current state (it is
updated on every reset and step) and ``info["action_mask"]`` marks the valid indices within
``MAX_CANDIDATES`` for fixed-size learners; an index past the candidates is an error, not a no-op.

    import gymnasium as gym, teamtr.gym  # registers the ids
    env = gym.make("teamtr/EscapeRoom-v0", agents=4)
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from teamtr.envs import make
from teamtr.team import Team, TeamState

MAX_CANDIDATES = 64
IDS = {"teamtr/EscapeRoom-v0": "escape-room", "teamtr/SoftwareTeam-v0": "software-team"}


def prompt_text(state: TeamState) -> str:
    """The observation string: task, state and history lines."""
    history = " | ".join(state.history) or "none"
    return f"{state.task}\nstate: {state.state}\nrecent: {history}"


class TeamEnv(gym.Env):
    """A Team as a gymnasium environment (one step = one coordinator decision)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, world: str, render_mode: str | None = None, **options: Any) -> None:
        self.team = Team(make(world, **options))
        self.render_mode = render_mode
        self.observation_space = spaces.Text(
            max_length=8192, min_length=0, charset=string.printable
        )
        self.action_space = spaces.Discrete(MAX_CANDIDATES)  # narrowed on every reset and step
        self._state: TeamState | None = None

    def _info(self, state: TeamState) -> dict[str, Any]:
        self.action_space = spaces.Discrete(len(state.candidates))
        mask = np.zeros(MAX_CANDIDATES, dtype=np.int8)
        mask[: len(state.candidates)] = 1
        return {
            "candidates": [c.text for c in state.candidates],
            "action_mask": mask,
            "expert": state.expert,
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        self._state = self.team.reset(seed)
        return prompt_text(self._state), self._info(self._state)

    def step(self, action: int):
        state, reward, done, info = self.team.step(int(action))
        self._state = state
        extra = self._info(state)
        extra.update(outcome=info["outcome"], terms=info["terms"], events=info["events"])
        return prompt_text(state), reward, info["terminated"], info["truncated"], extra

    def render(self) -> str | None:
        if self._state is None:
            return None
        lines = [prompt_text(self._state)]
        lines += [f"  {i}. {c.text}" for i, c in enumerate(self._state.candidates)]
        return "\n".join(lines)


def register_ids() -> None:
    """Register the gymnasium ids (idempotent)."""
    for env_id, world in IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=TeamEnv, kwargs={"world": world})


register_ids()
