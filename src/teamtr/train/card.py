"""The run's model card: the newest checkpoint's adapter ``README.md`` with the world, the config
summary and, once ``final_eval.json`` exists, the final results table. The trainer writes it with every
checkpoint; call ``write_model_card(run_dir)`` again after the final evaluation to add the table."""

from __future__ import annotations

from pathlib import Path

from teamtr.atomic import atomic_write_text, read_json
from teamtr.policy.card import model_card
from teamtr.telemetry.log import FINAL_EVAL_FILE, read_config, read_resumes
from teamtr.train.checkpoint import latest_checkpoint



def write_model_card(run_dir: str | Path, checkpoint: Path | None = None) -> Path | None:
    """Write the card into ``checkpoint`` (default: the newest complete one) ``/coordinator/adapter``;
    return its path, or None when the run has no checkpoint yet."""
    run_dir = Path(run_dir)
    checkpoint = checkpoint if checkpoint is not None else latest_checkpoint(run_dir)
    if checkpoint is None:
        return None
    coordinator = checkpoint / "coordinator"
    settings = read_json(coordinator / "coordinator.json", "coordinator settings")
    base = read_json(coordinator / "adapter" / "adapter_config.json", "adapter config")["base_model_name_or_path"]
    final = run_dir / FINAL_EVAL_FILE
    results = read_json(final, "final evaluation") if final.is_file() else None
    path = coordinator / "adapter" / "README.md"
    atomic_write_text(path, model_card(settings, str(base), read_config(run_dir), results, read_resumes(run_dir)))
    return path
