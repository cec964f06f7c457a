"""Role adapters for the local LLM role agents: agreement with the scripted choice and team success,
before and after tuning (issue 12's "optional light tuning").

    python benchmarks/role_adapters.py [--config default] [--checkpoint RUN] [--set key=value ...]
        [--out results/role_adapters_escape-room.json]

Every role agent is an ``llm`` agent (``team.agents.default=llm``) on the coordinator's base model;
``train/roles.py`` collects ``team.llm.role_adapters.demos`` scripted choices per role (oracle
directives, a share ``explore`` random), measures agreement on ``heldout`` held-out views and the
oracle coordinator's success over ``eval_episodes`` held-out episodes with the untuned agents, tunes
one adapter per role, and measures both again. ``--checkpoint RUN``: the run's config and trained
coordinator (the agents use its base model), and also that coordinator's success with the untuned and
the tuned agents on the same episodes. Prints a table per role and writes JSON with ``--out``; the
adapters are not saved (``teamtr train`` with ``team.llm.role_adapters.enabled`` keeps them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import machine_line, table, write_json  # noqa: E402

from teamtr.config import load_config  # noqa: E402
from teamtr.policy.coordinator import build_coordinator  # noqa: E402
from teamtr.train import roles  # noqa: E402

ON = ["team.agents.default=llm", "team.llm.backbone=same", "team.llm.role_adapters.enabled=true"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="default", help="a shipped config name or a YAML file")
    ap.add_argument("--checkpoint", help="load this run's coordinator (its config.yaml is then the config)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    start = time.perf_counter()
    if args.checkpoint:
        from teamtr.serve import load_coordinator

        coordinator, config, _ = load_coordinator(args.checkpoint, None, [*ON, *args.set])
    else:
        config = load_config(args.config, [*ON, *args.set])
        coordinator = build_coordinator(config)
    names = roles.attach(config, coordinator)
    summary = roles.run_stage(config, coordinator)
    seconds = time.perf_counter() - start
    cfg = config.team.llm.role_adapters
    rows = [[r, summary[f"roles/agreement_before/{roles.tag(r)}"], summary[f"roles/agreement_after/{roles.tag(r)}"]]
            for r in names]
    rows.append(["mean", summary["roles/agreement_before"], summary["roles/agreement_after"]])
    print(f"{config.env.name} ({config.env.options() or 'defaults'}), backbone {config.model.backbone}: "
          f"{cfg.demos} demos and {cfg.heldout} held-out views per role, {cfg.epochs} epochs, lr {cfg.lr}; "
          f"{seconds:.0f} s; {machine_line()}")
    print(table(["role", "agreement untuned", "agreement tuned"], rows))
    actions = sorted(k.split("agreement_after/", 1)[1] for k in summary
                     if k.startswith("roles/agreement_after/") and "/" in k.split("agreement_after/", 1)[1])
    print(table(["role/scripted action", "agreement untuned", "agreement tuned"],
                [[a, summary[f"roles/agreement_before/{a}"], summary[f"roles/agreement_after/{a}"]] for a in actions]))
    if cfg.eval_episodes:
        print(f"oracle coordinator, {cfg.eval_episodes} held-out episodes: success with untuned LLM agents "
              f"{summary['roles/oracle_success_untuned']:.3f}, with tuned {summary['roles/oracle_success_tuned']:.3f}")
    if args.checkpoint and cfg.eval_episodes:  # the run's trained coordinator with the same two teams
        from teamtr.eval.policies import CoordinatorPolicy

        for tuned in (False, True):
            summary[f"trained_success_{'tuned' if tuned else 'untuned'}"] = roles.team_success(
                config, coordinator, tuned, cfg.eval_episodes, CoordinatorPolicy(coordinator, greedy=True))
        print(f"trained coordinator, same episodes: success with untuned LLM agents "
              f"{summary['trained_success_untuned']:.3f}, with tuned {summary['trained_success_tuned']:.3f}")
    if args.out:
        write_json(args.out, {"env": config.env.name, "options": config.env.options(),
                              "backbone": config.model.backbone, "settings": cfg.model_dump(),
                              "seconds": seconds, "summary": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
