"""Evaluation: the evaluation policies and batched episode runs (torch only for coordinator policies)."""

from teamtr.eval.evaluate import run_episodes, summarize
from teamtr.eval.policies import BASELINES, POLICIES, Policy, baseline, build_policies

__all__ = ["BASELINES", "POLICIES", "Policy", "baseline", "build_policies", "run_episodes", "summarize"]
