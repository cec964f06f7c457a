"""Rollout speed of ``rollout.backend`` inline vs ray when worlds are slow.

A slow world stands in for a world or role agent that waits (an LLM teammate behind an API, a remote
simulator): ``SlowEscapeRoom`` is the escape room with ``step_delay`` seconds of waiting in every
step. One iteration's collection (``Trainer.collect``: ``--episodes`` episodes, all teams as one batch,
the tiny random coordinator) is timed for: inline; ray with ``--workers`` workers in lockstep; ray
without lockstep. The coordinator's scoring is the same in all three; only where teams step differs.

    PYTHONPATH=src:benchmarks python benchmarks/rollout_backends.py            # 0.05 s per step
    PYTHONPATH=src:benchmarks python benchmarks/rollout_backends.py --delay 0  # worlds as fast as they are
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, median, table, write_json  # noqa: E402

from teamtr.config import load_config  # noqa: E402
from teamtr.envs.escape_room import EscapeRoomWorld  # noqa: E402


class SlowEscapeRoom(EscapeRoomWorld):
    """The escape room, waiting ``step_delay`` seconds in every step (a slow world or teammate)."""

    def __init__(self, step_delay: float = 0.05, agents: int = 3, items: int = 3, max_steps: int | None = None,
                 hints: bool = False) -> None:
        super().__init__(agents=agents, items=items, max_steps=max_steps, hints=hints)
        self.step_delay = step_delay

    def step(self, actions):  # type: ignore[no-untyped-def]
        time.sleep(self.step_delay)
        return super().step(actions)


def collect_seconds(backend: list[str], args: argparse.Namespace, tmp: str, repeats: int) -> tuple[list[float], int]:
    """Seconds of each of ``repeats`` collections (after one warm-up) and decisions per collection."""
    from teamtr.train.trainer import Trainer

    config = load_config(None, [
        "model.backbone=tiny-random", "bc.enabled=false", f"rollout.episodes={args.episodes}",
        f"rollout.parallel={args.episodes}", "env.name=rollout_backends:SlowEscapeRoom",
        f"env.step_delay={args.delay}", f"env.max_steps={args.max_steps}", "log.tensorboard=false",
        f"run_dir={tmp}/{'-'.join(backend)}", f"rollout.workers={args.workers}", *backend])
    with Trainer(config) as trainer:
        trainer.collect()  # warm-up: actors start, first calls
        times, n = [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            rollout, _, _ = trainer.collect()
            times.append(time.perf_counter() - start)
            n = len(rollout)
    return times, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.05, help="seconds of waiting per world step")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="results/rollout_backends.json")
    args = parser.parse_args()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    modes = {"inline": ["rollout.backend=inline"],
             f"ray, {args.workers} workers, lockstep": ["rollout.backend=ray", "rollout.lockstep=true"],
             f"ray, {args.workers} workers, no lockstep": ["rollout.backend=ray", "rollout.lockstep=false"]}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, sets in modes.items():
            times, n = collect_seconds(sets, args, tmp, args.repeats)
            results[name] = {"seconds": times, "decisions": n, "decisions_per_s": n / median(times)}
            print(f"{name}: {n / median(times):.1f} decisions/s", flush=True)
    ray.shutdown()
    base = results["inline"]["decisions_per_s"]
    print(f"\n{args.episodes} episodes of the escape room with {args.delay} s per step, tiny random coordinator")
    print(machine_line())
    print(table(["backend", "decisions/s", "speed-up"],
                [[k, v["decisions_per_s"], v["decisions_per_s"] / base] for k, v in results.items()]))
    out = write_json(args.out, {"settings": vars(args), "backends": results})
    print(f"wrote {out.resolve()}")


if __name__ == "__main__":
    main()
