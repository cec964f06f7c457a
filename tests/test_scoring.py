"""Prefix-shared, trie-packed scoring equals the naive prompt x candidate computation."""

import contextlib
import random

import pytest
import torch

from teamtr.core import TeamTRError
from teamtr.policy.backbone import load_backbone
from teamtr.policy.prompts import ChatFormat
from teamtr.policy.scoring import (CandidateScorer, EncodedDecision, double_backward_attention, pack, pack_prefixed,
                                   score_naive)


@pytest.fixture(scope="module")
def tiny():
    return load_backbone("tiny-random", device="cpu")


def random_decisions(rng: random.Random, batch: int, vocab: int = 49000) -> tuple[list[int], list[EncodedDecision]]:
    prefix = [rng.randrange(vocab) for _ in range(rng.randint(1, 25))]
    decs = []
    for _ in range(batch):
        dyn = tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 30)))
        stems = [[rng.randrange(vocab) for _ in range(5)] for _ in range(3)]
        cands = []
        for _ in range(rng.randint(1, 20)):
            stem = rng.choice(stems)[: rng.randint(0, 5)]  # shared starts exercise the trie
            cands.append(tuple(stem + [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]))
        decs.append(EncodedDecision(dyn, cands, [rng.randint(1, 4) for _ in cands]))
    return prefix, decs


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_packed_scores_equal_naive(tiny, batch):
    rng = random.Random(batch)
    scorer = CandidateScorer(tiny.model)
    for _ in range(2):
        prefix, decs = random_decisions(rng, batch)
        with torch.no_grad():
            out = scorer.forward(pack(prefix, decs, scorer.max_positions))
            ref = score_naive(tiny.model, prefix, decs)
        for b, row in enumerate(ref):
            got = out.sums[b, : len(row)]
            assert torch.allclose(got, torch.tensor(row), atol=1e-4, rtol=0), (got, row)
            assert not out.mask[b, len(row):].any()
            assert out.n_tokens[b, : len(row)].tolist() == [len(c) for c in decs[b].candidates]


def test_trie_shares_tokens_and_memo_matches_fresh(tiny):
    rng = random.Random(7)
    prefix, decs = random_decisions(rng, 4)
    packed = pack(prefix, decs, 2048)
    naive_tokens = sum(len(d.dynamic) + len(c) - 1 for d in decs for c in d.candidates)
    assert packed.tokens < naive_tokens
    scorer = CandidateScorer(tiny.model)
    with torch.no_grad():
        first = scorer.forward(packed).sums
        second = scorer.forward(packed).sums  # served from the memoised prefix
    assert torch.equal(first, second)


def _mixed_prefixes(rng: random.Random, batch: int) -> tuple[list[list[int]], list[EncodedDecision]]:
    """Decisions continuing 3 distinct prefixes of different lengths, interleaved (fresh names)."""
    prefixes = [random_decisions(rng, 1)[0] for _ in range(3)]
    prefixes[1] = prefixes[0] + [5, 6, 7]  # one prefix extends another: rows must not see the extra keys
    _, decs = random_decisions(rng, batch)
    return [prefixes[b % 3] for b in range(batch)], decs


def test_rows_with_different_prefixes_score_as_if_alone(tiny):
    """One packed pass over decisions that continue different prefixes (right-padded, each row
    attending its own) equals scoring each prefix's decisions on their own, with and without
    the memo and with gradients; equal prefixes are stored once."""
    rng = random.Random(11)
    prefixes, decs = _mixed_prefixes(rng, 7)
    packed = pack_prefixed(prefixes, decs, 2048)
    assert packed.prefix.shape[0] == 3 and packed.prefix_of.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert packed.prefix_keys[1] == tuple(prefixes[1])
    scorer = CandidateScorer(tiny.model)
    with torch.no_grad():
        alone = [scorer.forward(pack(prefixes[b], [decs[b]], 2048)) for b in range(7)]
        scorer.invalidate()
        cold = scorer.forward(packed)  # all three prefixes encoded in one padded pass
        assert scorer.memoised_prefixes == 3
        warm = scorer.forward(packed)  # all three served from the memo
    hot = scorer.forward(packed)  # with gradients: no memo
    for b, ref in enumerate(alone):
        n = int(ref.mask.sum())
        for out in (cold, warm, hot):
            assert torch.allclose(out.sums[b, :n], ref.sums[0, :n], atol=1e-5, rtol=0)
            assert torch.allclose(out.value_hidden[b], ref.value_hidden[0], atol=1e-5, rtol=0)
        assert not cold.mask[b, n:].any()
    hot.sums[cold.mask].sum().backward()
    assert tiny.model.model.embed_tokens.weight.grad is not None
    tiny.model.zero_grad(set_to_none=True)


def test_mixed_prefixes_from_the_cached_trunk_equal_a_full_pass(tiny):
    """Captured at layer 1, the rows' and prefixes' hidden states re-run through the top layers
    give the full pass's scores, for decisions with different prefixes."""
    rng = random.Random(12)
    prefixes, decs = _mixed_prefixes(rng, 5)
    packed = pack_prefixed(prefixes, decs, 2048)
    scorer = CandidateScorer(tiny.model)
    with torch.no_grad():
        full = scorer.forward(packed, capture_layer=1)
    assert full.captured_prefix.shape[:2] == packed.prefix.shape
    top = scorer.forward(packed, start_layer=1, rows_hidden=full.captured_rows, prefix_hidden=full.captured_prefix)
    assert torch.allclose(top.sums, full.sums, atol=1e-5, rtol=0)


def test_prefix_memo_is_bounded_but_keeps_what_a_call_uses(tiny):
    rng = random.Random(13)
    scorer = CandidateScorer(tiny.model)
    scorer._memo.capacity = 2
    prefixes, decs = _mixed_prefixes(rng, 6)
    with torch.no_grad():
        first = scorer.forward(pack_prefixed(prefixes, decs, 2048))
        assert scorer.memoised_prefixes == 3  # the call's three stay, though over capacity
        scorer.forward(pack([9, 9, 9], decs[:1], 2048))
        assert scorer.memoised_prefixes == 2
        again = scorer.forward(pack_prefixed(prefixes, decs, 2048))
    assert torch.allclose(first.sums, again.sums, atol=1e-4, rtol=0)


def test_normalizations(tiny):
    rng = random.Random(3)
    prefix, decs = random_decisions(rng, 2)
    scorer = CandidateScorer(tiny.model)
    with torch.no_grad():
        out = scorer.forward(pack(prefix, decs, 2048))
    m = out.mask
    assert torch.allclose(out.normalized("token")[m], out.sums[m] / out.n_tokens[m])
    assert torch.allclose(out.normalized("word")[m], out.sums[m] / out.n_words[m])
    with pytest.raises(TeamTRError, match="normalization"):
        out.normalized("bogus")


def test_chat_boundary_tokenisation_matches_full_string(tiny):
    """Static, dynamic and candidate parts tokenised separately equal the full chat string's tokens,
    and the packed score equals the model's log-prob of the candidate after the full chat text."""
    tok = tiny.tokenizer
    chat = ChatFormat.from_tokenizer(tok)
    assert chat.head.startswith("<|im_start|>system") and chat.end.startswith("<|im_end|>")
    task = "Escape room: bring every item to the door, then open it."
    user = "map: in vault (only agent_B may enter).\nNext directive?"
    cand = "agent_B: fetch the map"
    parts = [chat.head + task + chat.user_head, user + chat.assistant_head, cand]
    ids = [tok(p, add_special_tokens=False).input_ids for p in parts]
    end = tok(chat.end, add_special_tokens=False).input_ids[:1]
    full = tok("".join(parts) + chat.end, add_special_tokens=False).input_ids
    assert ids[0] + ids[1] + ids[2] + end == full[: len(full) - len(tok(chat.end, add_special_tokens=False).input_ids) + 1]
    scorer = CandidateScorer(tiny.model)
    dec = EncodedDecision(tuple(ids[1]), [tuple(ids[2] + end)], [4])
    with torch.no_grad():
        got = scorer.forward(pack(ids[0], [dec], 2048)).sums[0, 0]
        seq = torch.tensor([ids[0] + ids[1] + ids[2] + end])
        logp = torch.log_softmax(tiny.model(seq).logits.float(), -1)[0]
        start = len(ids[0]) + len(ids[1])
        ref = sum(logp[start - 1 + i, t] for i, t in enumerate(ids[2] + end))
    assert abs(float(got) - float(ref)) < 1e-4


def _fisher_vector_product(scorer: CandidateScorer, prefix, decs, context) -> list[torch.Tensor]:
    """TRPO's double backward: the gradient of (d KL / d params) . v through the scoring pass."""
    params = [scorer.base.embed_tokens.weight, scorer.layers[0].self_attn.q_proj.weight]
    with context:
        out = scorer.forward(pack(prefix, decs, scorer.max_positions))
    logp = torch.log_softmax(out.sums.masked_fill(~out.mask, -1e9), -1)
    kl = (logp.detach().exp() * (logp.detach() - logp)).sum()
    grads = torch.autograd.grad(kl, params, create_graph=True)
    return torch.autograd.grad(sum(g.sum() for g in grads), params)


def test_double_backward_attention_makes_scoring_twice_differentiable(tiny):
    scorer = CandidateScorer(tiny.model)
    prefix, decs = random_decisions(random.Random(0), 2)
    fvp = _fisher_vector_product(scorer, prefix, decs, double_backward_attention())
    assert all(torch.isfinite(v).all() for v in fvp) and float(fvp[1].abs().sum()) > 0
    if tiny.model.config._attn_implementation == "sdpa":  # the fused kernel has no double backward
        with pytest.raises(RuntimeError, match="not implemented"):
            _fisher_vector_product(scorer, prefix, decs, contextlib.nullcontext())


def test_bad_input_errors(tiny):
    with pytest.raises(TeamTRError, match="empty candidate list"):
        pack([1, 2], [EncodedDecision((3,), [], [])], 2048)
    with pytest.raises(TeamTRError, match="exceed the model's context"):
        pack([1] * 10, [EncodedDecision((3,) * 10, [(5,) * 30], [1])], 40)


def test_unknown_backbone_names_the_options():
    with pytest.raises(TeamTRError, match="built-in name"):
        load_backbone("no-such-org/no-such-model-xyz", device="cpu")
    with pytest.raises(TeamTRError, match="no such directory"):
        load_backbone("./definitely/not/here", device="cpu")
