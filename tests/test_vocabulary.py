"""Fresh names: pool sizes, disjointness from the fixed vocabularies, per-episode draws."""

import random
from collections import Counter

import pytest

from teamtr.core import TeamTRError
from teamtr.envs import escape_room, software_team
from teamtr.envs import vocabulary as vocab


def test_forbidden_words_keep_shared_scaffolding_and_drop_each_vocabularys_own_words():
    forbidden = vocab.forbidden_words(["agent_A", "map", "new features"], ["agent_P", "gem", "fresh features"])
    assert {"a", "map", "new", "p", "gem", "fresh"} <= forbidden
    assert "agent" not in forbidden and "features" not in forbidden
    assert vocab.RESERVED <= forbidden


def test_combine_filters_forbidden_and_repeated_words_and_skips_empty_parts():
    got = vocab.combine([["", "red", "old"], ["cup", "map", "old"]], frozenset({"map"}))
    assert got == ("cup", "old", "red cup", "red old", "old cup")
    assert vocab.combine([["lead", "x"], ["coder"]], frozenset({"lead"}), joiner="_") == ("x_coder",)


def test_draw_gives_distinct_names_none_a_prefix_of_another_or_of_a_taken_one():
    pool = ["cup", "cupboard", "cu", "plate", "plates", "spoon"]
    for seed in range(200):
        taken = ["spoon"]
        got = vocab.draw(random.Random(seed), pool, 2, taken)
        assert len(set(got)) == 2 and "spoon" not in got
        assert not any(a != b and b.startswith(a) for a in got for b in got)
        assert taken == ["spoon", *got]  # later draws of the episode stay apart from these


def test_draw_from_a_pool_too_small_says_so():
    with pytest.raises(TeamTRError, match="could not draw 3 distinct names from a pool of 2"):
        vocab.draw(random.Random(0), ["cup", "plate"], 3)


def test_episode_rng_is_seeded_by_world_and_seed_apart_from_the_dynamics_stream():
    a = vocab.episode_rng("escape-room", 3).random()
    assert a == vocab.episode_rng("escape-room", 3).random()
    assert a != vocab.episode_rng("escape-room", 4).random()
    assert a != vocab.episode_rng("software-team", 3).random()
    assert a != random.Random(3).random()


def _escape_room_fixed_words(which: str) -> set[str]:
    return vocab.words(n for names in escape_room.VOCAB[which].values() for n in names)


def test_escape_room_pools_are_large_and_share_no_word_with_the_fixed_vocabularies():
    sizes = {kind: len(pool) for kind, pool in escape_room.FRESH.items()}
    assert sizes["agents"] >= 2000 and sizes["items"] >= 2000 and sizes["zones"] >= 1000
    heldout, default = _escape_room_fixed_words("heldout"), _escape_room_fixed_words("default")
    fixed = {name for v in escape_room.VOCAB.values() for names in v.values() for name in names}
    for kind, pool in escape_room.FRESH.items():
        for name in pool:
            assert name not in fixed and name.isascii() and len(name) <= 24, (kind, name)
            assert not (vocab.words([name]) - {"agent"}) & (heldout | default), (kind, name)
            assert ":" not in name and "hall" not in vocab.words([name])


def test_software_team_pools_share_no_word_with_the_fixed_vocabularies():
    texts = {which: [t for part in v.values() for t in part.values()] for which, v in software_team.VOCAB.items()}
    heldout, default = vocab.words(texts["heldout"]), vocab.words(texts["default"])
    own = (heldout | default) - (heldout & default)  # "the", "first", "product" are scaffolding of both
    assert {"lead", "code", "developer", "tester", "spec", "module", "new"} <= own
    for skill, pool in software_team.FRESH["roles"].items():
        assert len(pool) >= 50, skill
    for part in software_team.FRESH.values():
        for pool in part.values():
            for name in pool:
                assert name.isascii() and not vocab.words([name]) & own, name


def test_every_drawn_software_team_word_avoids_the_heldout_and_default_words():
    texts = {which: [t for part in v.values() for t in part.values()] for which, v in software_team.VOCAB.items()}
    heldout, default = vocab.words(texts["heldout"]), vocab.words(texts["default"])
    own = (heldout | default) - (heldout & default)
    seen_roles = set()
    for seed in range(300):
        v = software_team.fresh_vocabulary(seed)
        assert set(v) == {"roles", "names", "verbs", "goals"}
        for part in ("roles", "names", "verbs", "goals"):
            assert set(v[part]) == set(software_team.VOCAB["default"][part]), part
            assert not vocab.words(v[part].values()) & own, (seed, v[part])
        names = list(v["roles"].values()) + list(v["names"].values())
        assert not any(a != b and b.startswith(a) for a in names for b in names), names
        assert v["verbs"]["api"].split(" the ")[0] == v["verbs"]["ui"].split(" the ")[0]
        seen_roles.add(tuple(v["roles"].values()))
    assert len(seen_roles) == 300  # 300 seeds, 300 different teams


def test_fresh_names_take_each_form_about_equally_often():
    """Each form of name is drawn about as often as any other, so the held-out names' forms (one word:
    "gem", "crypt"; one letter: "agent_P") are common in training, not 0-2% of draws as when every name
    of a pool was equally likely (two-word names outnumber one-word ones 40 to 1)."""
    from teamtr.envs import make

    counts: dict[str, Counter] = {"agents": Counter(), "items": Counter(), "zones": Counter()}
    world = make("escape-room", names="fresh")
    for seed in range(400):
        world.reset(seed)
        for name in world.agents:
            suffix = name.removeprefix("agent_")
            counts["agents"][(sum(c.isalpha() for c in suffix), suffix[-1].isdigit())] += 1
        for kind in ("items", "zones"):
            for name in getattr(world, kind):
                counts[kind][len(name.split())] += 1
    for kind, forms in (("agents", 4), ("items", 2), ("zones", 2)):
        shares = [n / sum(counts[kind].values()) for n in counts[kind].values()]
        assert len(shares) == forms and all(abs(x - 1 / forms) < 0.05 for x in shares), (kind, counts[kind])
    roles = Counter(len(name.split("_")) for seed in range(300)
                    for name in software_team.fresh_vocabulary(seed)["roles"].values())
    assert abs(roles[1] / sum(roles.values()) - 0.5) < 0.06, roles  # "tester" and "tech_lead" alike


def test_a_name_pool_checks_its_forms():
    pool = vocab.NamePool((("a",), ("b", "c")))
    assert len(pool) == 3 and list(pool) == ["a", "b", "c"]
    rng = random.Random(0)
    picks = [pool.pick(rng) for _ in range(3000)]
    assert abs(picks.count("a") / 3000 - 0.5) < 0.04  # the one-name form is half of all draws
    with pytest.raises(TeamTRError, match="at least one name"):
        vocab.NamePool((("a",), ()))
