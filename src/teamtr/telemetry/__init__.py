"""Telemetry: episode metrics (no torch here), run logging and reports."""

from teamtr.telemetry.metrics import METRICS, EpisodeMetrics, EpisodeTracker, summarize

__all__ = ["METRICS", "EpisodeMetrics", "EpisodeTracker", "summarize"]
