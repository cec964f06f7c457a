"""`teamtr export RUN --merged DIR`: the trained coordinator as a standard transformers model directory.

The LoRA adapter is merged into a float32 copy of the base weights and written with ``save_pretrained``
next to the tokenizer, so ``AutoModelForCausalLM.from_pretrained(DIR)`` (or vLLM) loads it as-is. The
value head is not part of it (it only serves training). ``teamtr.json`` records how the coordinator
turns candidate scores into a policy; ``README.md`` is a short model card.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from teamtr.core import TeamTRError

CARD = """# {name}

A TeamTR coordinator: the LoRA adapter of `{checkpoint}` merged into a float32 copy of its base model,
`{backbone}`. It was trained to choose a directive for a team of role agents in the world
`{world}` ({options}); `teamtr_config.yaml` is the run's full config.

Load it with `AutoModelForCausalLM.from_pretrained("{directory}")` (or serve it with vLLM). The value
head of the checkpoint is **not** part of this model: it only served training. To serve the coordinator
itself, candidates and probabilities included, use `teamtr serve {checkpoint}`.

## Scoring candidates (the coordinator's policy)

The coordinator does not generate free text: it chooses among candidate directives. For a decision
(task, state, candidates), with this tokenizer's chat template:

1. prompt = the chat template applied to a system message holding the task and a user message holding
   the state text, then `Next directive?` on its own line (a `Recent: ...` line before it when there is
   history), with the assistant turn opened (`add_generation_prompt=True`);
2. each candidate is its directive text followed by the end marker `{end}`; score(c) = the sum of the
   log-probabilities of its tokens given the prompt, {normalization_text};
3. pi(c) = softmax over the candidates of score(c) / {temperature}.

`teamtr.json` holds these settings (`normalization`, `temperature`, `end_marker`) and, in `chat_format`,
the exact prompt pieces: prompt = head + task + user_head + user text + assistant_head.
"""

_NORMALIZATION_TEXT = {"sum": "not normalised", "token": "divided by its number of tokens (end marker included)",
                       "word": "divided by its number of whitespace-separated words"}


def _merged_model(coordinator: Any) -> Any:
    """The backbone with the adapter folded into its weights, the LoRA wrappers removed."""
    return coordinator.peft.merge_and_unload()


def write_merged(checkpoint: str, directory: Path, sets: list[str], overwrite: bool = False) -> Path:
    """Write the merged model, tokenizer, ``teamtr.json``, the run's config and ``README.md`` into
    ``directory`` (atomically: a failed export leaves no half-written folder)."""
    from teamtr.atomic import atomic_directory
    from teamtr.config import dump_config
    from teamtr.serve import load_coordinator

    if directory.exists() and any(directory.iterdir()) and not overwrite:
        raise TeamTRError(f"--merged {directory} exists and is not empty; give a new folder or --overwrite.")
    coordinator, config, _ = load_coordinator(checkpoint, None, ["model.dtype=float32", "model.device=cpu", *sets])
    settings = {"backbone": coordinator.backbone.name, "normalization": coordinator.normalization,
                "temperature": coordinator.temperature, "end_marker": coordinator.chat.end,
                "chat_format": dataclasses.asdict(coordinator.chat),
                "world": config.env.name, "env_options": config.env.options(), "checkpoint": checkpoint}
    model = _merged_model(coordinator)
    with atomic_directory(directory) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        coordinator.tokenizer.save_pretrained(tmp)
        (tmp / "teamtr.json").write_text(json.dumps(settings, indent=2))
        (tmp / "teamtr_config.yaml").write_text(dump_config(config))
        options = ", ".join(f"{k}={v}" for k, v in config.env.options().items()) or "default options"
        (tmp / "README.md").write_text(CARD.format(
            name=directory.name, checkpoint=checkpoint, backbone=coordinator.backbone.name, world=config.env.name,
            options=options, directory=directory, end=coordinator.chat.end.strip() or repr(coordinator.chat.end),
            normalization_text=_NORMALIZATION_TEXT[coordinator.normalization],
            temperature=coordinator.temperature))
    return directory


def cmd_export(args: argparse.Namespace) -> int:
    out = write_merged(args.checkpoint, Path(args.merged), list(args.set), overwrite=args.overwrite)
    print(f"wrote {out} (AutoModelForCausalLM.from_pretrained({str(out)!r}))")
    return 0


def add_export(sub: Any) -> None:
    """Register ``export`` on the ``teamtr`` sub-command parser."""
    from teamtr.cli import _add_set, _sub

    ex = _sub(sub, "export", "write the coordinator as a standard transformers model (adapter merged)",
              "  teamtr export runs/default --merged exported/default\n", cmd_export)
    ex.add_argument("checkpoint", metavar="RUN_OR_CHECKPOINT", help="a run directory or checkpoint folder")
    ex.add_argument("--merged", metavar="DIR", required=True, help="the folder to write")
    ex.add_argument("--overwrite", action="store_true", help="replace DIR when it holds files")
    _add_set(ex)
