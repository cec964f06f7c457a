"""Real SmolLM2-135M-Instruct runs (``make test-slow``): loading, exact scoring, a short BC probe."""

import random

import pytest
import torch

from teamtr.policy.backbone import load_backbone
from teamtr.policy.scoring import CandidateScorer, EncodedDecision, pack, score_naive

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    return load_backbone("smollm2-135m-instruct", device="cpu")


def test_default_backbone_is_the_real_model(smol):
    tok = smol.tokenizer
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        nxt = smol.model(ids).logits[0, -1].argmax()
    assert tok.decode(nxt).strip() == "Paris"
    assert smol.model.config.num_hidden_layers == 30 and smol.model.config.hidden_size == 576


def test_packed_scoring_equals_naive_on_real_weights(smol):
    rng = random.Random(0)
    scorer = CandidateScorer(smol.model)
    prefix = [rng.randrange(49000) for _ in range(40)]
    decs = [EncodedDecision(tuple(rng.randrange(49000) for _ in range(30)),
                            [tuple(rng.randrange(49000) for _ in range(rng.randint(2, 9))) for _ in range(12)],
                            [1] * 12) for _ in range(4)]
    with torch.no_grad():
        got = scorer.forward(pack(prefix, decs, scorer.max_positions)).sums
    want = score_naive(smol.model, prefix, decs)
    for b, row in enumerate(want):
        assert torch.allclose(got[b, : len(row)], torch.tensor(row), atol=1e-3)
