"""The multi-process learner: 2 gloo processes on 127.0.0.1 take the same update as 1 process with the
same global batch (to 1e-5); rank 0 alone checkpoints; a run resumes under another process count."""

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.rl import Rollout
from teamtr.train.checkpoint import list_checkpoints
from teamtr.train.collect import Collector, TrainSeeds
from teamtr.train.distributed import Distributed, RankSeeds, merge_rollouts, select
from teamtr.train.trainer import Trainer

TINY = [
    "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=4", "rollout.parallel=4",
    "train.iterations=1", "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0",
    "algo.minibatch_size=8", "algo.epochs=2", "log.tensorboard=false", "env.max_steps=6",
    "algo.lr=0.003", "algo.warmup_updates=0", "algo.target_kl=1000",
]


def _config(run_dir: Path, *extra: str):
    return load_config(None, [*TINY, f"run_dir={run_dir}", *extra])


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(fn, world: int, *args) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo on the loopback interface
    mp.spawn(fn, args=(world, _port(), *args), nprocs=world, join=True)


def _join(rank: int, world: int, port: int) -> Distributed:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    return Distributed(rank, world)


def _trainable(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in (*trainer.algo.policy_tensors, *trainer.algo.value_tensors)]


def _update_worker(rank: int, world: int, port: int, run_dir: str, out: str) -> None:
    """Every rank collects the same 4 episodes; rank k keeps the episodes with id % 2 == k (one
    process keeps both, merged the same way) and takes one update."""
    d = _join(rank, world, port) if world > 1 else Distributed()
    trainer = Trainer(_config(Path(run_dir)), dist=d)
    collector = Collector(trainer.coordinator, trainer.make_team, TrainSeeds(3, 1_000_000),
                          torch.Generator().manual_seed(5), trainer._ref_logp)
    full, _, _ = collector.collect(4, 4)
    parts = [select(full, (full.episode_id % 2 == k).nonzero().squeeze(1)) for k in range(2)]
    rollout = d.gather_rollout(parts[rank]) if world > 1 else merge_rollouts(parts)
    rollout.compute_advantages(0.99, 0.95, True)
    before = _trainable(trainer)
    metrics = trainer.update(rollout)
    torch.save({"before": before, "after": _trainable(trainer), "metrics": metrics, "n": len(rollout)},
               f"{out}.{world}.{rank}")
    trainer.close()
    d.close()


def test_two_gloo_processes_take_the_one_process_update(tmp_path):
    out = str(tmp_path / "params")
    _update_worker(0, 1, 0, str(tmp_path / "one"), out)
    _spawn(_update_worker, 2, str(tmp_path / "two"), out)
    one, r0, r1 = (torch.load(f"{out}.{w}.{r}") for w, r in ((1, 0), (2, 0), (2, 1)))
    assert one["n"] == r0["n"] == r1["n"] > 16  # several minibatches of 8 per epoch
    moved = max(float((a - b).abs().max()) for a, b in zip(one["after"], one["before"]))
    assert moved > 1e-3  # the update changed the weights, so equality below says something
    for got in (r0, r1):
        assert all(torch.equal(a, b) for a, b in zip(got["before"], one["before"]))
        for a, b in zip(got["after"], one["after"]):
            assert torch.allclose(a, b, atol=1e-5, rtol=0), float((a - b).abs().max())
        assert got["metrics"]["policy/loss"] == pytest.approx(one["metrics"]["policy/loss"], abs=1e-5)
        assert got["metrics"]["optim/epochs_run"] == one["metrics"]["optim/epochs_run"] == 2


def _train_worker(rank: int, world: int, port: int, run_dir: str, iterations: int, resume: bool,
                  out: str) -> None:
    d = _join(rank, world, port)
    trainer = Trainer(_config(Path(run_dir), f"train.iterations={iterations}"), resume=resume, dist=d)
    trainer.run()
    torch.save(_trainable(trainer), f"{out}.{rank}")
    trainer.close()
    d.close()


@pytest.mark.slow  # three launches of two processes: minutes on a 2-core CPU
def test_resume_under_another_process_count(tmp_path):
    run, out = tmp_path / "run", str(tmp_path / "params")
    _spawn(_train_worker, 2, str(run), 1, False, out)  # iteration 1 on 2 processes
    assert [p.name for p in list_checkpoints(run)] == ["iter_000001"]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x.get("kind", "train") == "train"]
    assert len(train) == 1  # rank 0 alone logs
    with Trainer(_config(run, "train.iterations=2"), resume=True, dist=Distributed()) as one:  # iteration 2 alone
        assert one.iteration == 1
        one.run()
        after_two = _trainable(one)
    _spawn(_train_worker, 2, str(run), 3, True, out)  # iteration 3 on 2 processes again
    assert [p.name for p in list_checkpoints(run)][-1] == "iter_000003"
    r0, r1 = torch.load(f"{out}.0"), torch.load(f"{out}.1")
    assert all(torch.equal(a, b) for a, b in zip(r0, r1))  # rank 1 resumed the same weights and stayed in step
    assert any(not torch.equal(a, b) for a, b in zip(r0, after_two))  # and iteration 3 trained


def test_micro_batches_are_refused_under_torchrun(tmp_path):
    """Every backward pass ends in an all-reduce there, so accumulated chunks would be summed twice."""
    with pytest.raises(TeamTRError, match="algo.micro_batch_size runs in one learner process"):
        Trainer(_config(tmp_path / "r", "algo.micro_batch_size=4"), dist=Distributed(0, 2))


def test_merged_rollouts_keep_episodes_apart_and_ranks_draw_disjoint_seeds():
    def part(ids):
        n = len(ids)
        return Rollout.from_tensors(logp=torch.zeros(n, 2), ref_logp=torch.zeros(n, 2),
                                    mask=torch.ones(n, 2, dtype=torch.bool), actions=torch.zeros(n, dtype=torch.long),
                                    values=torch.zeros(n), rewards=torch.arange(n).float(),
                                    terminated=torch.ones(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
                                    episode_id=torch.tensor(ids))
    merged = merge_rollouts([part([0, 1]), part([0, 1, 2])])
    assert merged.episode_id.tolist() == [0, 2, 1, 3, 5]
    assert merged.rewards.tolist() == [0, 1, 0, 1, 2]
    streams = [TrainSeeds(7, 1_000_000) for _ in range(2)]
    ranks = [RankSeeds(s, r, 2) for r, s in enumerate(streams)]
    a, b = ranks[0].take(3), ranks[1].take(3)
    assert set(range(a, a + 3)).isdisjoint(range(b, b + 3)) and b == a + 3
    assert streams[0].next == streams[1].next == a + 6
    with pytest.raises(TeamTRError, match="rollout.episodes = 5 does not split over 2"):
        Distributed(1, 2).share(5)
