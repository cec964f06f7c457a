"""The LLM-judge reward term of a config (``rewards.judge``), wired to its scorer: the coordinator's
backbone with the adapter off (``backbone: same``), another backbone, or an OpenAI-compatible endpoint."""

from __future__ import annotations

from typing import Any

from teamtr.policy.answers import ModelAnswerScorer
from teamtr.policy.backbone import load_backbone
from teamtr.rewards.judge import AnswerScorer, Judge, RemoteAnswerScorer


def judge_scorer(name: str, coordinator: Any = None, device: str = "auto", dtype: str = "auto",
                 remote_model: str = "default") -> AnswerScorer:
    """The judge's scorer for ``rewards.judge.backbone`` ``name``: ``same`` (``coordinator``'s backbone,
    adapter off), an ``http(s)://`` API base (``RemoteAnswerScorer`` asking for ``remote_model``), or a
    backbone name to load."""
    if name.startswith(("http://", "https://")):
        return RemoteAnswerScorer(name, model=remote_model)
    if name == "same":
        return ModelAnswerScorer(coordinator.backbone, scorer=coordinator.scorer, context=coordinator.disable_adapter)
    return ModelAnswerScorer(load_backbone(name, device=device, dtype=dtype))


def build_judge(config: Any, coordinator: Any = None) -> Judge | None:
    """The ``Judge`` that ``config.rewards.judge`` describes (None when disabled); its start iteration is
    ``rewards.start_iteration.judge``, like every other term's."""
    j, model = config.rewards.judge, config.model
    if not j.enabled:
        return None
    scorer = judge_scorer(j.backbone, coordinator, model.device, model.dtype, j.remote_model)
    return Judge(scorer, j.rubric, weight=j.weight, clip=j.clip, every=j.every,
                 start_iteration=config.rewards.start_iteration.get("judge", 0))


__all__ = ["build_judge", "judge_scorer"]
