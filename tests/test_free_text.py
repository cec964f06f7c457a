"""Free-text mode's parser: text onto the whole-team grammar, anything else invalid."""

import itertools
import random

from test_decoding import random_grammar

from teamtr.policy.grammar import DirectiveGrammar, parse_free_text

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
