"""The ray rollout backend, on a local Ray bound to 127.0.0.1: lockstep gives the same metrics as
inline on the same seeds; a killed worker is replaced, its episodes restart and the loss is counted."""

import json
import os
from collections import Counter
from pathlib import Path

import pytest
import torch

from teamtr.config import load_config
from teamtr.train.trainer import Trainer

ray = pytest.importorskip("ray")

TINY = [
    "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=4", "rollout.parallel=4",
    "train.iterations=1", "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0",
    "algo.minibatch_size=16", "algo.epochs=1", "log.tensorboard=false", "env.max_steps=6",
    "rollout.workers=2",
]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keeps Ray's servers on the loopback here
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


def _config(run_dir: Path, *extra: str):
    return load_config(None, [*TINY, f"run_dir={run_dir}", *extra])


def _train_line(run_dir: Path) -> dict:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (line,) = [x for x in lines if "policy/loss" in x]
    return {k: v for k, v in line.items() if not k.startswith(("perf/", "time", "wall"))}


def test_lockstep_ray_gives_the_inline_metrics(tmp_path):
    lines = {}
    for backend in ("inline", "ray"):
        with Trainer(_config(tmp_path / backend, f"rollout.backend={backend}")) as trainer:
            trainer.run()
        lines[backend] = _train_line(tmp_path / backend)
    inline, ray_line = lines["inline"], lines["ray"]
    assert ray_line.pop("rollout/workers_lost") == 0 and ray_line.pop("rollout/episodes_restarted") == 0
    assert ray_line == inline
    assert inline["policy/loss"] != 0 and inline["episode/return"] != 0


@pytest.mark.parametrize("lockstep", [True, False])
def test_a_killed_worker_is_replaced_and_counted(tmp_path, lockstep):
    trainer = Trainer(_config(tmp_path / "run", "rollout.backend=ray", f"rollout.lockstep={str(lockstep).lower()}"))

    def kill_first_worker(round_: int, workers: list) -> None:
        if round_ == 2:
            ray.kill(workers[0])

    trainer.collector.on_round = kill_first_worker
    rollout, episodes, transcripts = trainer.collect()
    assert trainer.collector.stats == {"rollout/workers_lost": 1.0, "rollout/episodes_restarted": 2.0}
    assert len(episodes) == len(transcripts) == 4
    # Only the restarted attempts' decisions are kept: the rollout holds exactly the transcripts' steps.
    rows = Counter(rollout.episode_id.tolist())
    assert sorted(rows.values()) == sorted(len(t["steps"]) for t in transcripts)
    assert sum(rows.values()) == len(rollout) and len(rows) == 4
    rollout.compute_advantages(0.99, 0.95, True)  # every episode ends with a terminal or cut decision
    metrics = trainer.update(rollout)
    assert torch.isfinite(torch.tensor(metrics["policy/loss"]))
    trainer.close()
