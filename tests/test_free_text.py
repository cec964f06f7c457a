"""Free-text mode: the parser (text onto the whole-team grammar, anything else invalid), decoding
over the whole vocabulary with exact log-probs, and what the Team does with parsed and invalid text."""

import itertools
import random

import pytest
import torch
from test_decoding import random_grammar
from test_whole_team import coord  # noqa: F401  (the tiny coordinator with a non-zero adapter)

from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.policy.decoding import fold_prefixes
from teamtr.policy.free_text import act_free_text, decode_texts, parse_lines, score_texts, stop_ids
from teamtr.policy.grammar import DirectiveGrammar, parse_free_text
from teamtr.team import FreeText, Team

G = DirectiveGrammar(("agent_A", "agent_B", "agent_C"), (
    ("agent_A: fetch the key", "agent_A: fetch the map", "agent_A: carry on"),
    ("agent_B: open the door", "agent_B: carry on"),
    ("agent_C: fetch the key", "agent_C: carry on"),
))


def test_lenient_on_form_strict_on_content():
    assert parse_free_text(G, "agent_A: fetch the map\nagent_B: open the door\nagent_C: carry on") == (1, 0, 1)
    assert parse_free_text(G, "  - Agent_A:  Fetch the MAP.\n\n1. agent_c: fetch the key!") == (1, 1, 0)
    assert parse_free_text(G, "agent_B: open the door") == (2, 0, 1)  # the others carry on
    assert parse_free_text(G, "agent_B: open the window") is None  # not an option
    assert parse_free_text(G, "agent_D: fetch the key") is None  # no such agent
    assert parse_free_text(G, "agent_A: fetch the key\nagent_A: fetch the map") is None  # twice
    assert parse_free_text(G, "Everyone, get out of here!") is None
    assert parse_free_text(G, "") is None and parse_free_text(G, "\n  \n") is None


def test_every_output_of_random_grammars_parses_back():
    rng = random.Random(0)
    for _ in range(200):
        g = random_grammar(rng)
        for choice in itertools.islice(itertools.product(*(range(len(o)) for o in g.options)), 50):
            assert parse_free_text(g, g.text(choice)) == choice
            assert parse_free_text(g, g.text(choice).upper().replace("\n", " .\n- ")) == choice


# ----------------------------------------------------------------- decoding: exact log-probs


def _states(n, **options):
    return [Team(make("escape-room", **options)).reset(seed) for seed in range(n)]


def _full_pass(model, prompt, output, temperature):
    """log pi and entropy per output token from one full-sequence forward pass over the whole vocabulary."""
    ids = list(prompt) + list(output)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1 : len(ids) - 1] / temperature, dim=-1)
    return lp.gather(1, torch.tensor(output)[:, None]).squeeze(1), -(lp.exp() * lp).sum(-1)


@pytest.mark.parametrize("temperature,names", [(1.0, "default"), (0.7, "default"), (1.0, "fresh")])
def test_sampled_text_log_prob_equals_a_full_sequence_pass(coord, temperature, names):
    """Exact against a full pass, also when every row has its own static prefix (fresh names: one batch)."""
    coord.temperature = temperature
    try:
        states = _states(6, agents=3, names=names)
        out = act_free_text(coord, states, max_new_tokens=10, generator=torch.Generator().manual_seed(3))
    finally:
        coord.temperature = 1.0
    model = coord.backbone.model
    scores, rows = out.scores, range(len(states))
    assert len({p for p, _ in out.prompts}) == (6 if names == "fresh" else 1)
    assert len(set(out.tokens)) == 6  # sampled, not one text six times
    for j, i in enumerate(rows):
        prefix, dynamic = out.prompts[i]
        lp, ent = _full_pass(model, prefix + dynamic, out.tokens[i], temperature)
        n = len(out.tokens[i])
        assert abs(float(scores.logp[j].sum()) - float(lp.sum())) < 1e-4
        assert torch.allclose(scores.entropy[j, :n], ent, atol=1e-4)
        assert float(scores.entropy[j, :n].min()) > 1.0  # the whole vocabulary, not a masked few
    # the teacher-forced pass of the update gives the same numbers, and the full distributions
    coord.temperature = temperature
    try:
        prefix, dynamics = fold_prefixes([p for p, _ in out.prompts], [d for _, d in out.prompts])
        again = score_texts(model, prefix, dynamics, list(out.tokens), temperature=temperature)
    finally:
        coord.temperature = 1.0
    assert torch.allclose(again.logp, scores.logp, atol=1e-4)
    assert torch.allclose(again.full.exp().sum(-1)[again.mask], torch.ones(int(again.mask.sum())), atol=1e-4)


def test_stop_tokens_end_a_row_and_are_part_of_it(coord):
    states = _states(3, agents=2)
    (prefix, enc), *_ = coord.encode(states[:1])
    dyn = [e.dynamic for _, e in coord.encode(states)]
    tokens, s = decode_texts(coord.backbone.model, prefix, dyn, stop=set(), max_new_tokens=4, greedy=True)
    first = tokens[0][0]
    stopped, s2 = decode_texts(coord.backbone.model, prefix, dyn, stop={first}, max_new_tokens=4, greedy=True)
    assert stopped[0] == (first,)  # stopped at its first token, which counts
    for row, full in zip(stopped, tokens):  # the others run on as before, up to the stop token or the bound
        cut = full.index(first) + 1 if first in full else len(full)
        assert row == full[:cut]
    assert s2.mask.sum(1).tolist() == [len(r) for r in stopped]
    assert float(s2.logp[0, 1:].abs().sum()) == 0.0 and s2.logp[0, 0] == s.logp[0, 0]
    assert coord.end_ids[0] in stop_ids(coord)
    with pytest.raises(TeamTRError, match="max_new_tokens"):
        decode_texts(coord.backbone.model, prefix, dyn, stop=set(), max_new_tokens=100_000)


# ----------------------------------------------------------------- the team: parsed, invalid, read as is
def test_unparseable_text_is_an_invalid_directive_and_penalised():
    team = Team(make("escape-room", agents=3, items=3))
    state = team.reset(0)
    assert parse_lines(state, "Everyone, get out of here!") is None
    _, reward, _, info = team.step(FreeText("Everyone, get out of here!", None))
    invalid = [e for e in info["events"] if e.kind == "directive_invalid"]
    assert len(invalid) == 1 and invalid[0].agent is None
    assert info["terms"]["invalid"] == -0.5  # the invalid term's default weight, once
    assert all(agent.directive is None for agent in team.agents.values())  # it reached nobody
    assert info["directive"].text == "Everyone, get out of here!"
    assert team.history[-1] == "team could not: it names no valid directive"
    assert reward == pytest.approx(sum(info["terms"].values()))


def test_parsed_text_reaches_its_agents_and_the_text_is_rewarded():
    team = Team(make("escape-room", agents=3, items=3))
    state = team.reset(0)
    names = team.world.agents
    a = next(i for i, d in enumerate(state.candidates) if d.target == names[1] and d.task.startswith("fetch")
             and team.world.check(names[1], d) is None)
    text = f"Right team, listen closely please:\n- {state.candidates[a].text.upper()}."
    assert parse_lines(state, text) is None  # a line that is no option spoils the text
    text = f"- {state.candidates[a].text.upper()}.\n{names[0]}: carry on"
    lines = parse_lines(state, text)
    assert lines == [a]
    _, _, _, info = team.step(FreeText(text, tuple(lines)))
    got = team.agents[names[1]].directive
    assert got.task == state.candidates[a].task and got.text == text  # the task parsed, the text as written
    assert team.agents[names[0]].directive is None and info["directive"].text == text
    assert [e.kind for e in info["events"]][0] == "directive_followed"
    words = len(text.split())
    assert info["terms"]["length"] == pytest.approx(-0.01 * max(0, words - 8))
    _, _, _, again = team.step(FreeText(text, tuple(lines)))  # the same text twice: the repeat term
    assert again["terms"]["repeat"] == pytest.approx(-0.2)


def test_llm_role_agents_read_the_text_as_written():
    from teamtr.agents.llm import LLMResolver
    from teamtr.agents.mixed import MixedTeam

    prompts = []

    def score(batch):  # records what the agents read; picks the first action
        prompts.extend(p.user for p in batch)
        return [[1.0] + [0.0] * (len(p.options) - 1) for p in batch]

    world = make("escape-room", agents=2, items=2)
    team = Team(world, make_agent=MixedTeam({"default": "llm"}, {"llm": LLMResolver(score)}))
    state = team.reset(1)
    a = next(i for i, d in enumerate(state.candidates) if d.target == world.agents[0] and d.kind != "noop"
             and world.check(world.agents[0], d) is None)
    text = f"1. {state.candidates[a].text.upper()}!"  # not an option's text, but it parses to one
    lines = parse_lines(state, text)
    assert lines == [a]
    team.step(FreeText(text, tuple(lines)))
    assert any(f"Directive in force: {text}." in p for p in prompts)  # its agent read it as written
