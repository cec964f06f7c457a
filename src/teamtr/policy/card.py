"""The model card (``README.md``) saved beside a coordinator's PEFT adapter.

It says what the adapter is for (a TeamTR coordinator choosing among candidate directives), which
base model it needs (``base_model_name_or_path`` of ``adapter_config.json``), its LoRA shape, and, when
the run is known, the world, a summary of the config and the final results table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Config keys shown in the card's training summary (dotted paths into the resolved config).
CARD_KEYS = ("env.name", "algo.name", "algo.lr", "algo.clip_eps", "algo.kl_coef", "rollout.episodes",
             "train.iterations", "bc.enabled", "bc.demos", "team.history_len", "policy.normalization",
             "policy.temperature", "model.train_layers", "model.rl_layers", "seed")


def _get(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _base_note(backbone: str, base: str) -> str:
    if backbone == "smollm2-135m-instruct":
        return (f"`{base}`: the safetensors copy of SmolLM2-135M-Instruct that TeamTR writes on its first load "
                "of the built-in GGUF (`$TEAMTR_CACHE/smollm2-135m-instruct`); run any TeamTR command with "
                "this backbone once to create it.")
    if backbone.startswith("tiny-random"):
        return f"`{base}`: a random test model TeamTR builds in memory; it has no saved weights to load."
    return f"`{base}`"


def _results_table(rows: Mapping[str, Mapping[str, float]], episodes: Mapping[str, Any]) -> list[str]:
    from teamtr.telemetry.metrics import spread_columns, with_spread

    columns = spread_columns(next(iter(rows.values())))
    lines = ["| policy | episodes | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    for name, row in rows.items():
        cells = " | ".join(with_spread(row, c) or "" for c in columns)
        lines.append(f"| {name} | {episodes.get(name, '')} | {cells} |")
    return lines


def model_card(settings: Mapping[str, Any], base: str, config: Mapping[str, Any] | None = None,
               results: Mapping[str, Any] | None = None, resumes: Sequence[Mapping[str, Any]] = ()) -> str:
    """The card's markdown. ``settings``: ``Coordinator.settings()``; ``base``: the base model's hub id
    or directory; ``config``: the run's resolved config; ``results``: the run's ``final_eval.json``;
    ``resumes``: the rows of its ``resumes.jsonl`` (the config holds the values after the last one)."""
    lora = settings.get("lora") or {}
    lines = ["---", f"base_model: {base}", "library_name: peft", "tags: [teamtr, lora, coordinator]", "---", "",
             "# TeamTR coordinator adapter", "",
             "A LoRA adapter trained with TeamTR (behaviour cloning, then trust-region RL) so that a causal LM "
             "coordinates a team of role agents: at each decision it scores candidate directives by their "
             "token log-probability and picks one. The value head and the TeamTR settings lie one folder up "
             "(`value_head.safetensors`, `coordinator.json`).", "",
             "## Base model", "", _base_note(str(settings.get("backbone", base)), base), "",
             "## Adapter", "",
             f"- LoRA rank {lora.get('rank')}, alpha {lora.get('alpha')}, dropout {lora.get('dropout')}, "
             f"on {', '.join(lora.get('target_modules', ()))}",
             f"- adapted decoder layers: {settings.get('train_layers')} of "
             f"{(settings.get('model') or {}).get('layers')}",
             f"- candidate score: {settings.get('normalization')} log-prob, temperature {settings.get('temperature')}",
             ""]
    if config:
        options = {k: v for k, v in (config.get("env") or {}).items() if k != "name"}
        lines += ["## Training", "", f"World: `{_get(config, 'env.name')}`"
                  + (f" with {', '.join(f'{k}={v}' for k, v in options.items())}" if options else ""), ""]
        lines += [f"- `{key}`: {_get(config, key)}" for key in CARD_KEYS if _get(config, key) is not None]
        for row in resumes:
            keys = row.get("changed") or {}
            if row.get("branched_from"):
                lines.append(f"- branched from `{row['branched_from']}` at iteration {row.get('iteration')}")
            elif {k for k in keys if k != "run_dir"}:
                lines.append(f"- resumed at iteration {row.get('iteration')} with "
                             + ", ".join(f"`{k}` {before} -> {after}" for k, (before, after) in sorted(keys.items())))
        lines.append("")
    rows = (results or {}).get("rows")
    if rows:
        lines += ["## Results (held-out seeds)", "", *_results_table(rows, results.get("episodes") or {}), ""]
    lines += ["## Load", "", "```python", "from peft import AutoPeftModelForCausalLM", "",
              'model = AutoPeftModelForCausalLM.from_pretrained("path/to/this/adapter")',
              "```", "", "or, with the value head and the candidate scoring: `teamtr eval --checkpoint RUN_DIR`.", ""]
    return "\n".join(lines)
