"""A trained coordinator with scripted vs local-LLM vs remote-LLM role agents (issue 12's table).

    python benchmarks/llm_agents.py RUN_OR_CHECKPOINT [--episodes 20] [--seed 10000]
        [--remote-url http://127.0.0.1:8080/v1 --remote-model smollm2] [--zero-shot] [--out FILE]

Rows: ``scripted`` (the run's own team), ``local-LLM`` (every role agent an ``LLMAgent`` on the
coordinator's backbone with its adapter disabled), ``local-LLM tuned`` when the run tuned role adapters
(``team.llm.role_adapters``: the same agents, each with its role's adapter) and, with ``--remote-url``, ``remote-LLM`` (every role
agent a ``RemoteAgent`` on that OpenAI-compatible endpoint, e.g. ``python -m llama_cpp.server --model
SmolLM2-135M-Instruct.Q4_1.gguf --model_alias smollm2 --port 8080``). ``--zero-shot`` adds the same rows
with the coordinator's adapter off, for contrast. Columns: success, return, communication
effectiveness, invalid and ignored rates (over all directive deliveries), and the remote agents'
unusable replies and fallbacks per episode. The world and its options are the run's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import machine_line, write_json  # noqa: E402

from teamtr.eval.evaluate import run_episodes  # noqa: E402
from teamtr.eval.policies import CoordinatorPolicy, ZeroShotPolicy  # noqa: E402
from teamtr.eval.team_agents import agent_factory  # noqa: E402
from teamtr.serve import load_coordinator  # noqa: E402
from teamtr.telemetry.metrics import summarize  # noqa: E402

COLUMNS = ("success", "return", "comm_effectiveness", "invalid_rate", "ignored_rate", "reply_invalid",
           "remote_fallback")


def row(metrics: list[Any], transcripts: list[dict[str, Any]]) -> dict[str, float]:
    """The table's columns; the ignored rate over all deliveries, counted from the events."""
    summary = summarize(metrics)
    kinds = [k for episode in transcripts for step in episode["steps"] for k in step["events"]]
    deliveries = sum(kinds.count(f"directive_{k}") for k in ("followed", "ignored", "invalid"))
    return {"success": summary["success"], "return": summary["return"],
            "comm_effectiveness": summary["comm_effectiveness"], "invalid_rate": summary["invalid_rate"],
            "ignored_rate": kinds.count("directive_ignored") / deliveries if deliveries else 0.0,
            "reply_invalid": summary.get("events/reply_invalid", 0.0),
            "remote_fallback": summary.get("events/remote_fallback", 0.0), "episodes": summary["episodes"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a run directory or checkpoint folder (its config gives the world)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=10_000, help="first held-out world seed")
    ap.add_argument("--remote-url", help="an OpenAI-compatible endpoint for the remote-LLM row")
    ap.add_argument("--remote-model", default="default")
    ap.add_argument("--zero-shot", action="store_true", help="also the rows of the adapter-less coordinator")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sets = [f"team.remote.base_url={args.remote_url}", f"team.remote.model={args.remote_model}",
            "team.remote.timeout_s=120", "team.remote.concurrency=1"] if args.remote_url else []
    coordinator, config, _ = load_coordinator(args.checkpoint, None, sets)
    # label -> (agent kind, with the role adapters the run tuned: team.llm.role_adapters)
    kinds = {"scripted": (None, False), "local-LLM": ("llm", False),
             **({"local-LLM tuned": ("llm", True)} if coordinator.roles.names else {}),
             **({"remote-LLM": ("remote", False)} if args.remote_url else {})}
    policies = {"trained": CoordinatorPolicy(coordinator, greedy=True)}
    if args.zero_shot:
        policies["zero-shot"] = ZeroShotPolicy(coordinator, greedy=True)
    seeds = list(range(args.seed, args.seed + args.episodes))
    rows: dict[str, dict[str, float]] = {}
    for pname, policy in policies.items():
        for label, (kind, tuned) in kinds.items():
            config.team.llm.role_adapters.enabled = tuned  # first: the team section is checked on the next line
            config.team.agents = {"default": kind} if kind else {}
            transcripts: list[dict[str, Any]] = []
            start = time.perf_counter()
            metrics = run_episodes(config.env.name, config.env.options(), policy, seeds,
                                   rewards=config.rewards.composer(), history_len=config.team.history_len,
                                   label=f"{pname} + {label}", transcripts=transcripts,
                                   make_agent=agent_factory(config, coordinator))
            rows[f"{pname} coordinator + {label} agents"] = {**row(metrics, transcripts),
                                                              "seconds": time.perf_counter() - start}
    print(f"{config.env.name}, {args.episodes} held-out episodes from seed {args.seed}; {machine_line()}")
    print("| coordinator + agents | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[c]:.3f}" for c in COLUMNS) + " |")
    if args.out:
        write_json(args.out, {"env": config.env.name, "options": config.env.options(), "episodes": args.episodes,
                              "seed": args.seed, "checkpoint": args.checkpoint,
                              "command": "python " + " ".join(["benchmarks/llm_agents.py", *sys.argv[1:]]),
                              "remote_model": args.remote_model if args.remote_url else None, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
