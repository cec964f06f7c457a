"""TRPO on a real (tiny) Coordinator: the Fisher-vector products differentiate the scoring pass twice."""

from __future__ import annotations

import pytest
import torch

from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator
from teamtr.policy.scoring import double_backward_attention
from teamtr.rl import AlgoConfig, RLInputError, Rollout, categorical_kl, make_algorithm, masked_log_softmax
from test_coordinator import decisions, perturb_lora


def test_trpo_steps_a_coordinator_within_delta_under_double_backward_attention() -> None:
    coord = Coordinator(load_backbone("tiny-random", device="cpu"))
    perturb_lora(coord)
    out = coord.act(decisions(8), keep=True)
    n = len(out.choices)
    logp = out.logp.masked_fill(~out.mask, 0.0)
    rollout = Rollout.from_tensors(
        logp=logp, ref_logp=logp, mask=out.mask, actions=torch.tensor(out.choices),
        values=out.values.detach(), rewards=torch.randn(n, generator=torch.Generator().manual_seed(0)),
        terminated=torch.ones(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
        episode_id=torch.arange(n), handles=torch.tensor(out.handles))
    algo = make_algorithm("trpo", coord.policy_param_groups(), coord.value_parameters(),
                          AlgoConfig(minibatch_size=4, trpo_delta=0.01))

    def evaluate(mb):
        return coord.evaluate(mb.handles)

    if coord.backbone.model.config._attn_implementation == "sdpa":  # fused kernels: no double backward
        with pytest.raises(RLInputError, match="double_backward_attention"):
            algo.update(evaluate, rollout)
    with double_backward_attention():
        metrics = algo.update(evaluate, rollout)
    assert metrics["trpo/accepted"] == 1.0 and metrics["trpo/step_size"] > 0
    with torch.no_grad():
        kl = categorical_kl(logp, masked_log_softmax(coord.evaluate(out.handles)[0], out.mask), out.mask)
    assert 0 < float(kl.mean()) <= 0.01 * (1 + 1e-3)
    assert metrics["policy/kl_old_new"] == pytest.approx(float(kl.mean()), rel=1e-3)
