"""Gymnasium ids for every world: ``teamtr/<CamelName>-v0`` (``teamtr/EscapeRoom-v0``,
``teamtr/SoftwareTeam-v0``, ``teamtr/Overcooked-v0``, ``teamtr/Spread-v0``, and a plug-in world
``relay`` as ``teamtr/Relay-v0``). One step is one coordinator decision of a ``team.Team``.

Registration: ``import teamtr`` registers the ids, at once when gymnasium is already imported, else
as soon as gymnasium is (``import teamtr`` itself imports neither gymnasium nor torch). Gymnasium 1.x
dropped its entry-point plug-ins, so ``import gymnasium`` alone registers nothing; name the module in
the id instead, which gymnasium imports for you::

    import gymnasium as gym
    env = gym.make("teamtr:teamtr/EscapeRoom-v0", agents=4)   # or: import teamtr; gym.make("teamtr/...")

Make options are the world's options (``teamtr envs`` lists them) plus ``max_candidates``.

Spaces: the observation is text (``spaces.Text``): the coordinator's prompt, task then state then
recent history (``prompt_text``). The action is a candidate index in the fixed
``Discrete(max_candidates)`` (default ``MAX_CANDIDATES``); the candidates change from state to state,
so ``info["action_mask"]`` marks the valid ones. An index past this state's candidates is carried out
as the no-op (``info["invalid_action"]`` is then True): masked learners never pick one, and random
sampling (``check_env``) stays legal. A world offering more candidates than ``max_candidates`` is an
error naming the option to raise.

``info`` keys, after ``reset`` and every ``step``:

- ``candidates``: this state's directive texts, ``world.directives()`` then the no-op (always last).
- ``action_mask``: ``int8`` array of shape ``(max_candidates,)``, 1 for the valid indices.
- ``expert``: the oracle's choice, the index in ``candidates`` of ``world.expert_directive()``
  (for imitation learning and as an upper bound); ``env.step(info["expert"])`` plays the oracle.

and after every ``step`` only:

- ``outcome``: ``"success"`` or ``"failure"`` once the episode ended, else None.
- ``terms``: reward term -> weighted value of this decision; ``reward == sum(terms.values())``.
- ``events``: every ``core.Event`` of the decision (the role agents' and the world's, all ticks).
- ``ticks``: world ticks the decision ran; ``directive``: the text carried out.
- ``invalid_action``: True when the action was past the candidates (carried out as the no-op).
"""

from __future__ import annotations

import re
import string
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from teamtr.core import TeamTRError
from teamtr.envs import make, names
from teamtr.team import Team, TeamState

MAX_CANDIDATES = 64
MAX_OBSERVATION_CHARS = 8192


def env_id(world: str) -> str:
    """The gymnasium id of a world name: ``escape-room`` -> ``teamtr/EscapeRoom-v0``."""
    camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", world))
    return f"teamtr/{camel}-v0"


def text_space() -> spaces.Text:
    """The space of every text observation (printable ASCII, newlines included)."""
    return spaces.Text(max_length=MAX_OBSERVATION_CHARS, min_length=0, charset=string.printable)


def prompt_text(state: TeamState) -> str:
    """The observation string: task, state and history lines."""
    history = " | ".join(state.history) or "none"
    return f"{state.task}\nstate: {state.state}\nrecent: {history}"


class TeamEnv(gym.Env):
    """A Team as a gymnasium environment (one step = one coordinator decision; see the module doc).

    Args:
        world: a world name (``teamtr.envs.names()``) or a ``"module:Class"`` path.
        render_mode: None or ``"ansi"`` (``render()`` returns the prompt and numbered candidates).
        max_candidates: size of the fixed action space.
        options: the world's options.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self, world: str, render_mode: str | None = None, max_candidates: int = MAX_CANDIDATES,
        **options: Any,
    ) -> None:
        self.team = Team(make(world, **options))
        self.render_mode = render_mode
        self.max_candidates = max_candidates
        self.observation_space = text_space()
        self.action_space = spaces.Discrete(max_candidates)
        self._state: TeamState | None = None

    def _info(self, state: TeamState) -> dict[str, Any]:
        n = len(state.candidates)
        if n > self.max_candidates:
            raise TeamTRError(
                f"{state.world} offers {n} candidates, more than max_candidates={self.max_candidates}; "
                f"pass max_candidates={n} or more to gym.make."
            )
        mask = np.zeros(self.max_candidates, dtype=np.int8)
        mask[:n] = 1
        return {"candidates": [c.text for c in state.candidates], "action_mask": mask, "expert": state.expert}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # An unseeded reset draws the episode seed from np_random, so one seed fixes every episode.
        self._state = self.team.reset(int(self.np_random.integers(0, 2**31 - 1)) if seed is None else seed)
        return prompt_text(self._state), self._info(self._state)

    def step(self, action: int):
        if self._state is None:
            raise TeamTRError("TeamEnv.step called before reset(); call env.reset(seed=...) first.")
        n = len(self._state.candidates)
        invalid = not 0 <= int(action) < n
        state, reward, _, info = self.team.step(n - 1 if invalid else int(action))
        self._state = state
        extra = self._info(state)
        extra.update(outcome=info["outcome"], terms=info["terms"], events=info["events"],
                     ticks=info["ticks"], directive=info["directive"].text, invalid_action=invalid)
        return prompt_text(state), float(reward), info["terminated"], info["truncated"], extra

    def render(self) -> str | None:
        if self._state is None:
            return None
        lines = [prompt_text(self._state)]
        lines += [f"  {i}. {c.text}" for i, c in enumerate(self._state.candidates)]
        return "\n".join(lines)


def register_ids() -> list[str]:
    """Register ``env_id(name)`` for every name in ``teamtr.envs.names()`` (idempotent: a new
    plug-in installed later is registered by calling it again); returns the ids."""
    ids = []
    for world in names():
        ids.append(env_id(world))
        if ids[-1] not in gym.registry:
            gym.register(id=ids[-1], entry_point="teamtr.gym:TeamEnv", kwargs={"world": world})
    return ids


register_ids()
