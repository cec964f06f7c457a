"""Curriculum: train on easier worlds first, then on the configured one (the seed's remedy for an
"early rise then plateau": *task too hard -> curriculum learning*).

A stage is a set of world-option overrides (``{agents: 2, items: 2}``), optionally a directive mode
(``team: {directives: whole_team}``: the seed's "grow the action complexity", single -> whole_team ->
free_text), and a rule for moving on:
training success, averaged over the stage's last ``window`` iterations, reaches ``success``; or
``max_iterations`` iterations were spent in it. After the listed stages comes the configured world
itself, with the configured ``team.directives``, for the rest of the run. Held-out evaluation always
uses the configured world and mode, so the curve measures the task that matters, not the stage. The
stage is decided between iterations, so one iteration's rollout is all of one mode.
"""

from __future__ import annotations

from typing import Any, Sequence

from teamtr.core import TeamTRError


class Curriculum:
    """Which world options training uses now, and when it moves on.

    Args:
        stages: the config's ``curriculum.stages`` (objects with ``env``, ``team.directives``,
            ``success``, ``window``, ``max_iterations``); may be empty.
        final: the configured world's options (``env`` without ``name``).
        directives: the configured ``team.directives``.
    """

    def __init__(self, stages: Sequence[Any], final: dict[str, Any], directives: str = "single") -> None:
        self.stages = list(stages)
        self.final = dict(final)
        self.final_directives = directives
        self.stage = 0
        self.history: list[float] = []  # training success per iteration of the current stage

    @property
    def finished(self) -> bool:
        """True once training runs on the configured world itself."""
        return self.stage >= len(self.stages)

    def options(self) -> dict[str, Any]:
        """World options for training episodes now."""
        if self.finished:
            return dict(self.final)
        return {**self.final, **self.stages[self.stage].env}

    def describe(self) -> str:
        """The stage in force and the options it sets (``curriculum stage 1: agents=2, items=2``); "" once
        training runs on the configured world."""
        if self.finished:
            return ""
        options = ", ".join(f"{k}={v}" for k, v in self.stages[self.stage].env.items())
        return f"curriculum stage {self.stage + 1}: {options}"

    def directives(self) -> str:
        """The directive mode for training episodes now (a stage without one keeps the configured mode)."""
        if self.finished:
            return self.final_directives
        team = getattr(self.stages[self.stage], "team", None)
        return getattr(team, "directives", None) or self.final_directives

    def record(self, success: float) -> bool:
        """Note one iteration's training success; move to the next stage when the current one's rule
        holds. Returns True when the stage changed."""
        if self.finished:
            return False
        if not 0.0 <= success <= 1.0:
            raise TeamTRError(f"curriculum: success rate {success!r} is not in [0, 1].")
        stage = self.stages[self.stage]
        self.history.append(float(success))
        window = self.history[-stage.window :]
        reached = (stage.success is not None and len(window) == stage.window
                   and sum(window) / len(window) >= stage.success)
        if reached or (stage.max_iterations is not None and len(self.history) >= stage.max_iterations):
            self.stage += 1
            self.history = []
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        stage = int(state.get("stage", 0))
        if not 0 <= stage <= len(self.stages):
            raise TeamTRError(
                f"checkpoint is at curriculum stage {stage} but the config lists {len(self.stages)} stages; "
                "resume with the config the run started with."
            )
        self.stage = stage
        self.history = [float(x) for x in state.get("history", [])]
