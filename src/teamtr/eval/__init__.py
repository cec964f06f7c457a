"""Evaluation: baseline policies and batched episode runs (no torch here)."""

from teamtr.eval.baselines import BASELINES, Policy, baseline
from teamtr.eval.evaluate import run_episodes, summarize

__all__ = ["BASELINES", "Policy", "baseline", "run_episodes", "summarize"]
