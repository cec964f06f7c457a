"""TeamTR: trust-region fine-tuning of a coordinator LLM that directs a team of agents."""

__version__ = "0.1.0"
