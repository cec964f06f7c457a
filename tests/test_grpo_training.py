"""Critic-free training end to end: GRPO/RLOO episodes come in groups that share a world seed, and the
update uses the group baseline (the value head is left alone while the adapter moves)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from teamtr.config import load_config
from teamtr.train.trainer import Trainer

TINY = ["model.backbone=tiny-random", "log.tensorboard=false", "bc.enabled=false", "train.iterations=1",
        "algo.epochs=1", "algo.lr=1e-2", "rollout.episodes=4", "rollout.parallel=4",
        "train.final_eval_episodes=0", "model.rl_layers=all", "env.agents=2", "env.items=2",
        "log.transcripts=4", "rollout.group_size=2"]


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_groups_share_a_seed_and_only_the_policy_moves(name, tmp_path):
    run = tmp_path / "run"
    config = load_config("default", [*TINY, f"algo.name={name}", f"run_dir={run}"])
    with Trainer(config) as trainer:
        head = {k: v.clone() for k, v in trainer.coordinator.value_head.state_dict().items()}
        adapter = trainer.coordinator.adapter_state()
        trainer.run()
        assert all(v.equal(trainer.coordinator.value_head.state_dict()[k]) for k, v in head.items())
        moved = trainer.coordinator.adapter_state()
        assert any(not v.equal(moved[k]) for k, v in adapter.items())
    seeds = Counter(json.loads(line)["seed"] for line in (run / "transcripts.jsonl").read_text().splitlines())
    assert sorted(seeds.values()) == [2, 2]  # two world seeds, two episodes each
    train = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"][0]
    assert train["optim/skipped_steps"] == 0
