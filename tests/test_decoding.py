"""Grammar-constrained whole-team decoding: every output valid, log-probs exact.

The reference ("naive") for a decoded output is the model's own forward pass over prompt + output, with
the next-token distribution at each output position restricted to the tokens that some whole-team
output continues with (found by enumerating every joint output, not by the decoder's tries) and
renormalised.
"""

import itertools
import math
import random

import pytest
import torch

from teamtr.core import TeamTRError
from teamtr.policy.backbone import load_backbone
from teamtr.policy.decoding import GrammarDecision, decode, score_outputs
from teamtr.policy.grammar import (
    DirectiveGrammar,
    TokenGrammar,
    automaton,
    grammar_from_candidates,
    tokenize_grammar,
)
from teamtr.policy.prompts import ChatFormat, TokenCache

WORDS = ["fetch", "the", "map", "key", "open", "door", "build", "UI", "mock", "data", "run", "tests",
         "publish", "API", "doc", "first", "carry", "on"]


@pytest.fixture(scope="module")
def tiny():
    return load_backbone("tiny-random", device="cpu")


@pytest.fixture(scope="module")
def toks(tiny):
    return TokenCache(tiny.tokenizer)


@pytest.fixture(scope="module")
def end(tiny, toks):
    return toks([ChatFormat.from_tokenizer(tiny.tokenizer).end])[0][:1]


def random_grammar(rng: random.Random, agents: int | None = None, most: int = 4) -> DirectiveGrammar:
    """2-4 agents, 1-``most`` options each; options share stems, and some are a word-prefix of another."""
    names = [f"agent_{c}" for c in "ABCD"[: agents or rng.randint(2, 4)]]
    options = []
    for name in names:
        stems = [" ".join(rng.choices(WORDS, k=rng.randint(1, 2))) for _ in range(2)]
        want, opts = rng.randint(1, most), []
        while len(opts) < want:
            stem = rng.choice(stems)
            text = f"{name}: {stem}" if rng.random() < 0.3 else f"{name}: {stem} {rng.choice(WORDS)}"
            if text not in opts:
                opts.append(text)
        options.append(tuple(opts))
    return DirectiveGrammar(tuple(names), tuple(options))


def random_text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(lo, hi)))


def random_batch(rng, toks, end, batch, agents=None, most=4):
    prefix = list(toks([random_text(rng, 0, 12)])[0])
    decisions = []
    for _ in range(batch):
        tg = tokenize_grammar(random_grammar(rng, agents, most), toks, end)
        decisions.append(GrammarDecision(toks([random_text(rng, 1, 15) + "\n"])[0], tg))
    return prefix, decisions


def joint_outputs(tg: TokenGrammar) -> list[tuple[int, ...]]:
    """Every whole-team output, built by concatenation, independently of the decoder."""
    outs = []
    for lines in itertools.product(*tg.lines):
        seq: list[int] = []
        for i, line in enumerate(lines):
            seq += list(line) + list(tg.separator if i < len(lines) - 1 else tg.end)
        outs.append(tuple(seq))
    return outs


def naive(model, prefix, dec: GrammarDecision, output, temperature=1.0):
    """Per-token masked log-probs, entropies and the argmax token, from one full forward pass."""
    every = joint_outputs(dec.grammar)
    assert tuple(output) in every
    ids = list(prefix) + list(dec.dynamic) + list(output)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    start = len(prefix) + len(dec.dynamic)
    logp, entropy, best = [], [], []
    for t, tok in enumerate(output):
        valid = sorted({o[t] for o in every if len(o) > t and o[:t] == tuple(output[:t])})
        lp = torch.log_softmax(logits[start - 1 + t, valid] / temperature, dim=-1)
        logp.append(float(lp[valid.index(tok)]))
        entropy.append(float(-(lp.exp() * lp).sum()))
        best.append(valid[int(lp.argmax())] if len(valid) > 1 else None)
    return torch.tensor(logp), torch.tensor(entropy), best


# ----------------------------------------------------------------- grammar (plain data)
def test_grammar_round_trip_and_validation():
    g = DirectiveGrammar(("a", "b"), (("a: x", "a: x y", "a: carry on"), ("b: z",)))
    assert g.size == 3
    assert g.text((1, 0)) == "a: x y\nb: z"
    assert [g.parse(g.text(c)) for c in [(0, 0), (1, 0), (2, 0)]] == [(0, 0), (1, 0), (2, 0)]
    assert g.parse("a: x\nb: q") is None and g.parse("a: x") is None and g.parse("a: x\nb: z\n") is None
    with pytest.raises(TeamTRError, match="newline"):
        DirectiveGrammar(("a",), (("a: x\ny",),))
    with pytest.raises(TeamTRError, match="twice"):
        DirectiveGrammar(("a",), (("a: x", "a: x"),))
    with pytest.raises(TeamTRError, match="no line options"):
        DirectiveGrammar(("a", "b"), (("a: x",), ()))
    with pytest.raises(TeamTRError, match="2 agents but 1"):
        DirectiveGrammar(("a", "b"), (("a: x",),))


def test_grammar_from_candidates_groups_by_target():
    cands = [("B", "B: fetch key"), (None, "team: finish"), ("A", "A: open door"), ("A+B", "pair A with B"),
             ("B", "B: fetch map"), ("C", "C: stray"), (None, "no new directive")]
    g, sources = grammar_from_candidates(["A", "B"], cands)
    assert g.agents == ("A", "B")
    assert g.options == (("A: open door", "A: carry on"), ("B: fetch key", "B: fetch map", "B: carry on"))
    assert sources == ((2, -1), (0, 4, -1))


def test_token_grammar_rejects_lines_that_do_not_parse_uniquely():
    # line (5,) + separator (9,) is the start of line (5, 9, 7): two outputs would read alike
    with pytest.raises(TeamTRError, match="parse uniquely"):
        automaton(TokenGrammar((((5,), (5, 9, 7)), ((3,),)), (9,), (2,)))
    with pytest.raises(TeamTRError, match="same tokens"):
        automaton(TokenGrammar((((5, 6), (5, 6)),), (9,), (2,)))


# ----------------------------------------------------------------- exactness
@pytest.mark.parametrize("greedy,temperature", [(False, 1.0), (False, 0.6), (True, 1.0)])
def test_decoded_logprobs_equal_naive_full_sequence(tiny, toks, end, greedy, temperature):
    rng = random.Random(int(greedy) * 10 + int(temperature * 10))
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        prefix, decs = random_batch(rng, toks, end, batch=5)
        out = decode(tiny.model, prefix, decs, greedy=greedy, temperature=temperature, generator=gen)
        s = out.scores
        for b, dec in enumerate(decs):
            n = len(out.tokens[b])
            assert out.tokens[b] == dec.grammar.output(out.choices[b])
            lp, ent, best = naive(tiny.model, prefix, dec, out.tokens[b], temperature)
            assert torch.allclose(s.logp[b, :n], lp, atol=1e-4, rtol=0), (s.logp[b, :n], lp)
            assert torch.allclose(s.entropy[b, :n], ent, atol=1e-4, rtol=0)
            assert abs(float(s.total[b]) - float(lp.sum())) < 1e-4
            assert not s.mask[b, n:].any() and s.mask[b, :n].all()
            assert s.branching[b, :n].tolist() == [x is not None for x in best]
            if greedy:
                picks = [tok for tok, x in zip(out.tokens[b], best) if x is not None]
                assert picks == [x for x in best if x is not None]


def test_distribution_over_all_outputs_sums_to_one(tiny, toks, end):
    rng = random.Random(5)
    for agents, temperature in [(2, 1.0), (3, 0.5), (4, 1.0)]:
        prefix, decs = random_batch(rng, toks, end, batch=1, agents=agents, most=3)
        dec = decs[0]
        outs = joint_outputs(dec.grammar)
        assert len(outs) == math.prod(len(lines) for lines in dec.grammar.lines)
        with torch.no_grad():
            s = score_outputs(tiny.model, prefix, [dec] * len(outs), outs, temperature=temperature)
        probs = s.total.double().exp()
        assert abs(float(probs.sum()) - 1.0) < 1e-4, float(probs.sum())
        assert float(probs.max() - probs.min()) > 1e-3  # a real distribution, not a constant
        lp, _, _ = naive(tiny.model, prefix, dec, outs[-1], temperature)
        assert abs(float(s.total[-1]) - float(lp.sum())) < 1e-4


def test_score_outputs_equals_decode_with_gradients(tiny, toks, end):
    rng = random.Random(11)
    prefix, decs = random_batch(rng, toks, end, batch=7)
    out = decode(tiny.model, prefix, decs, generator=torch.Generator().manual_seed(3), temperature=0.8)
    tiny.model.zero_grad()
    s = score_outputs(tiny.model, prefix, decs, out.tokens, temperature=0.8)
    d = out.scores
    assert s.logp.shape == d.logp.shape
    assert torch.allclose(s.logp, d.logp, atol=1e-4, rtol=0)
    assert torch.allclose(s.entropy, d.entropy, atol=1e-4, rtol=0)
    assert torch.equal(s.mask, d.mask) and torch.equal(s.branching, d.branching)
    assert torch.allclose(s.value_hidden, d.value_hidden, atol=1e-4, rtol=0)
    for key in ("branch_logp", "branch_mask", "branch_index", "branch_choice"):
        assert getattr(s, key).shape == getattr(d, key).shape, key
    assert torch.equal(s.branch_mask, d.branch_mask) and torch.equal(s.branch_index, d.branch_index)
    assert torch.equal(s.branch_choice, d.branch_choice)
    m = s.branch_mask
    assert torch.allclose(s.branch_logp[m], d.branch_logp[m], atol=1e-4, rtol=0)
    (s.total.sum() + s.entropy.sum()).backward()
    grads = [p.grad for p in tiny.model.model.layers[0].parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    tiny.model.zero_grad()


# ----------------------------------------------------------------- validity and sampling
def test_every_output_is_valid_over_thousands_of_grammars(tiny, toks, end):
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    seen = 0
    for round_ in range(8):
        prefix, decs = random_batch(rng, toks, end, batch=256)
        out = decode(tiny.model, prefix, decs, greedy=round_ == 7, generator=gen)
        text_end = tiny.tokenizer.decode(list(end))
        for b, dec in enumerate(decs):
            text = tiny.tokenizer.decode(list(out.tokens[b]))
            assert text.endswith(text_end)
            # the separately tokenised pieces are what the tokenizer makes of the whole text
            assert tiny.tokenizer(text, add_special_tokens=False)["input_ids"] == list(out.tokens[b])
            grammar = dec.grammar
            lines = [[tiny.tokenizer.decode(list(x)) for x in opts] for opts in grammar.lines]
            parsed = DirectiveGrammar(tuple(map(str, range(len(lines)))), tuple(map(tuple, lines))).parse(
                text[: -len(text_end)])
            assert parsed == out.choices[b], (text, lines)
            n = len(out.tokens[b])
            lp = out.scores.logp[b, :n]
            forced = ~out.scores.branching[b, :n]
            assert (lp <= 1e-6).all() and (lp[forced] == 0).all() and (out.scores.entropy[b, :n][forced] == 0).all()
            seen += 1
    assert seen == 2048


def test_sampling_follows_the_reported_distribution(tiny, toks, end):
    rng = random.Random(2)
    prefix, decs = random_batch(rng, toks, end, batch=1, agents=2, most=3)
    dec = decs[0]
    outs = joint_outputs(dec.grammar)
    with torch.no_grad():
        exact = score_outputs(tiny.model, prefix, [dec] * len(outs), outs, temperature=0.2).total.exp()
    gen = torch.Generator().manual_seed(4)
    counts = dict.fromkeys(outs, 0)
    for _ in range(5):
        for tokens in decode(tiny.model, prefix, [dec] * 400, temperature=0.2, generator=gen).tokens:
            counts[tokens] += 1
    freq = torch.tensor([counts[o] / 2000 for o in outs])
    assert float(exact.max()) > 1.5 / len(outs)  # temperature 0.2 makes it far from uniform
    assert float((freq - exact).abs().max()) < 0.04, (freq, exact)
    again = decode(tiny.model, prefix, [dec] * 8, temperature=0.2, generator=torch.Generator().manual_seed(9))
    assert again.tokens == decode(tiny.model, prefix, [dec] * 8, temperature=0.2,
                                  generator=torch.Generator().manual_seed(9)).tokens


# ----------------------------------------------------------------- cost and errors
def test_one_model_call_per_branching_point(tiny, toks, end):
    """Forced tokens are fed with the choice before them: calls = prefix + prompt + branching - 1."""
    calls = []
    hook = tiny.model.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        rng = random.Random(8)
        prefix, decs = random_batch(rng, toks, end, batch=6)
        out = decode(tiny.model, prefix, decs, generator=torch.Generator().manual_seed(0))
        most = int(out.scores.branching.sum(-1).max())
        assert len(calls) == 1 + 1 + max(most - 1, 0)
        assert len(calls) < min(len(t) for t in out.tokens)
        single = GrammarDecision(decs[0].dynamic, tokenize_grammar(
            DirectiveGrammar(("a", "b"), (("a: run tests",), ("b: carry on",))), toks, end))
        calls.clear()
        lone = decode(tiny.model, prefix, [single])
        assert len(calls) == 2 and float(lone.scores.total[0]) == 0.0 and lone.choices == [(0, 0)]
        mixed = decode(tiny.model, prefix, [single, *decs[:2]], generator=torch.Generator().manual_seed(1))
        assert mixed.choices[0] == (0, 0) and not mixed.scores.branching[0].any()
        for b, dec in enumerate([single, *decs[:2]]):
            lp, _, _ = naive(tiny.model, prefix, dec, mixed.tokens[b])
            assert abs(float(mixed.scores.total[b]) - float(lp.sum())) < 1e-4
    finally:
        hook.remove()


def test_errors_name_the_problem(tiny, toks, end):
    rng = random.Random(1)
    prefix, decs = random_batch(rng, toks, end, batch=2)
    out = decode(tiny.model, prefix, decs, greedy=True)
    bad = list(out.tokens[0])
    bad[-1] = bad[-1] + 1
    with pytest.raises(TeamTRError, match="not a valid continuation"):
        score_outputs(tiny.model, prefix, decs[:1], [bad])
    with pytest.raises(TeamTRError, match="stops before"):
        score_outputs(tiny.model, prefix, decs[:1], [out.tokens[0][:-1]])
    with pytest.raises(TeamTRError, match="1 outputs for 2"):
        score_outputs(tiny.model, prefix, decs, out.tokens[:1])
    with pytest.raises(TeamTRError, match="temperature"):
        decode(tiny.model, prefix, decs, temperature=0.0)
    with pytest.raises(TeamTRError, match="no decisions"):
        decode(tiny.model, prefix, [])
    with pytest.raises(TeamTRError, match="context"):
        decode(tiny.model, [1] * 2100, decs)


def test_lora_wrapped_model_decodes_exactly(toks, end):
    """The coordinator's peft-wrapped backbone (LoRA moved off zero) decodes and scores exactly."""
    from teamtr.policy.coordinator import Coordinator

    coord = Coordinator(load_backbone("tiny-random", device="cpu"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for grp in coord.policy_param_groups():
            for p in grp["params"]:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    model = coord.backbone.model
    rng = random.Random(4)
    prefix, decs = random_batch(rng, toks, end, batch=4)
    out = decode(model, prefix, decs, generator=g)
    scored = score_outputs(model, prefix, decs, out.tokens)
    scored.total.sum().backward()
    lora = [p for grp in coord.policy_param_groups() for p in grp["params"]]
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in lora)
    for b, dec in enumerate(decs):
        lp, _, _ = naive(model, prefix, dec, out.tokens[b])
        assert abs(float(out.scores.total[b]) - float(lp.sum())) < 1e-4
        assert abs(float(scored.total.detach()[b]) - float(lp.sum())) < 1e-4


@pytest.mark.slow
def test_real_model_decodes_exactly():
    smol = load_backbone("smollm2-135m-instruct", device="cpu")
    toks = TokenCache(smol.tokenizer)
    chat = ChatFormat.from_tokenizer(smol.tokenizer)
    end = toks([chat.end])[0][:1]
    agents = ["agent_A", "agent_B", "agent_C"]
    cands = [(a, f"{a}: {verb}") for a in agents for verb in ("fetch the map", "fetch the key", "open the door")]
    grammar, _ = grammar_from_candidates(agents, cands)
    prefix = toks([chat.head + "Escape room: bring the items to the door, then open it." + chat.user_head])[0]
    decs = [GrammarDecision(toks([f"map: in vault. tick {t}\nNext directive?" + chat.assistant_head])[0],
                            tokenize_grammar(grammar, toks, end)) for t in range(3)]
    out = decode(smol.model, prefix, decs, generator=torch.Generator().manual_seed(0))
    for b, dec in enumerate(decs):
        assert grammar.parse(smol.tokenizer.decode(list(out.tokens[b][:-1]))) == out.choices[b]
        lp, ent, _ = naive(smol.model, prefix, dec, out.tokens[b])
        assert torch.allclose(out.scores.logp[b, : len(lp)], lp, atol=1e-4, rtol=0)
        assert torch.allclose(out.scores.entropy[b, : len(ent)], ent, atol=1e-4, rtol=0)


def test_branch_distributions_give_exact_per_token_kl(tiny, toks, end):
    """The stored masked distributions at branching tokens: they sum to 1, hold the taken token's
    log-prob and entropy, and give the exact KL between two temperatures' policies."""
    from teamtr.rl.losses import categorical_kl

    rng = random.Random(12)
    prefix, decs = random_batch(rng, toks, end, batch=4)
    out = decode(tiny.model, prefix, decs, generator=torch.Generator().manual_seed(2))
    s = out.scores
    rows, pos = s.branch_index[:, 0], s.branch_index[:, 1]
    assert s.branch_index.shape[0] == int(s.branching.sum()) > 0
    assert torch.allclose(torch.logsumexp(s.branch_logp, -1), torch.zeros(len(rows)), atol=1e-5)
    assert torch.allclose(s.branch_logp.gather(1, s.branch_choice[:, None]).squeeze(1), s.logp[rows, pos])
    with torch.no_grad():
        hot = score_outputs(tiny.model, prefix, decs, out.tokens, temperature=0.5)
    kl = categorical_kl(s.branch_logp, hot.branch_logp, s.branch_mask)
    for n, (b, t) in enumerate(s.branch_index.tolist()):
        valid = s.branch_mask[n]
        logits = naive_logits(tiny.model, prefix, decs[b], out.tokens[b], t)
        p, q = torch.log_softmax(logits, -1), torch.log_softmax(logits / 0.5, -1)
        assert abs(float(kl[n]) - float((p.exp() * (p - q)).sum())) < 1e-5
        assert int(valid.sum()) == len(p)
    assert float(kl.max()) > 1e-4


def naive_logits(model, prefix, dec, output, t):
    """Full-sequence logits of the tokens valid at output position ``t`` (found by enumeration)."""
    every = joint_outputs(dec.grammar)
    valid = sorted({o[t] for o in every if len(o) > t and o[:t] == tuple(output[:t])})
    ids = list(prefix) + list(dec.dynamic) + list(output)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    return logits[len(prefix) + len(dec.dynamic) - 1 + t, valid]
