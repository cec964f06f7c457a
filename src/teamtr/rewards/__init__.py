"""Composable reward terms computed from events (no torch)."""

from teamtr.rewards.terms import DEFAULT_WEIGHTS, TERMS, RewardComposer, similarity

__all__ = ["DEFAULT_WEIGHTS", "TERMS", "RewardComposer", "similarity"]
