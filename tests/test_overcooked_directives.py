"""benchmarks/overcooked_directives.py: what an Overcooked coordinator's directives change."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("overcooked", reason="needs pip install 'teamtr[overcooked]'")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import overcooked_directives as od  # noqa: E402

from teamtr.core import NOOP, TeamTRError  # noqa: E402

STATE = ("chef_0 by a pot, holds onion, own: put an onion in the pot; chef_1 by the dishes, holds nothing, "
         "cannot: start the cooking. Pot 1 empty, pot 2 cooking 3/20. On counters: onion.")


def test_kind_reads_each_chefs_line() -> None:
    assert od.kind(STATE, "no new directive") == "noop"
    assert od.kind(STATE, "chef_0: put an onion in the pot") == "own rule"
    assert od.kind(STATE, "chef_0: fetch a dish") == "new"
    # the last chef's line runs on into the pots: its field is read before them
    assert od.kind(STATE, "chef_1: start the cooking") == "in force"
    assert od.kind(STATE, "chef_1: put an onion in the pot") == "new"
    with pytest.raises(TeamTRError, match="not an Overcooked directive"):
        od.kind(STATE, "chef_0: dance")
    with pytest.raises(TeamTRError, match="compact state texts only"):
        od.kind("XXPXX\nchef_0 holds nothing", "chef_0: fetch a dish")


def test_heuristic_says_new_directives_at_a_minority_of_decisions() -> None:
    rows = od.heuristic_rows(episodes=1)
    assert len(rows) == 5
    for name, row in rows.items():
        assert sum(row[k] for k in od.KINDS) == pytest.approx(1.0)
        assert row["in force"] == 0.0  # the heuristic never says the sub-task in force again
        assert 0.6 <= row["noop"] <= 0.75 and 0.02 <= row["new"] <= 0.2, (name, row)  # measured 0.04-0.16 new


def test_run_rows_from_an_end_of_run_table(tmp_path: Path) -> None:
    with pytest.raises(TeamTRError, match="eval_transcripts.jsonl is missing"):
        od.run_rows(tmp_path)
    steps = [{"state": STATE, "directive": d} for d in
             ("no new directive", "no new directive", "chef_0: put an onion in the pot", "chef_0: fetch a dish")]
    episodes = [{"policy": "trained @ layout=cramped_room", "steps": steps},
                {"policy": "trained @ layout=cramped_room", "steps": steps[:2]}]
    (tmp_path / "eval_transcripts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    (row,) = od.run_rows(tmp_path).values()
    assert row["episodes"] == 2 and row["decisions"] == 6
    assert (row["noop"], row["own rule"], row["new"]) == pytest.approx((4 / 6, 1 / 6, 1 / 6))


def test_the_heuristics_labels_are_a_function_of_the_prompt() -> None:
    # forced_coordination plays the same episode whatever the seed: one episode's table knows every
    # held-out prompt and its label
    (row,) = [r for name, r in od.label_rows(1, heldout=1).items() if "forced_coordination" in name]
    assert row["ceiling"] == 1.0 and row["heldout seen"] == 1.0 and row["lookup accuracy"] == 1.0
    assert 20 <= row["prompts"] < row["decisions"] / 2  # the kitchen cycles: 31 prompts in 69 decisions
    assert row["new"] > 0.1 and row["own rule"] > 0.1


def test_choice_rows_sort_a_policy_against_the_heuristics_labels() -> None:
    expert = od.choice_rows("heuristic", lambda states: [s.expert for s in states])
    silent = od.choice_rows("noop", lambda states: [next(i for i, c in enumerate(s.candidates)
                                                         if c.text == NOOP.text) for s in states])
    for (name, e), s in zip(expert.items(), silent.values()):
        assert e["accuracy"] == 1.0 and e["noop->noop"] == e["new->new"] == 1.0, name
        assert s["new->noop"] == s["noop->noop"] == 1.0 and "new->new" not in s, name
        shares = od.shares((st.state, st.candidates[st.expert].text)
                           for st in od.heuristic_path(name.split("=")[1], [od.HELD_OUT]))
        assert s["accuracy"] == pytest.approx(shares["noop"]), name  # right exactly where the label is the no-op


def _episode(layout: str, seed: int, choose) -> dict:
    """One 400-tick episode as an end-of-run transcript records it, ``choose(state)`` acting."""
    team = od.overcooked_team(layout, 400)
    state, done, steps = team.reset(seed), False, []
    while not done:
        choice = choose(state)
        steps.append({"tick": len(steps), "state": state.state, "choice": choice, "expert": state.expert})
        state, _, done, _ = team.step(choice)
    return {"policy": f"trained @ layout={layout}", "seed": seed, "steps": steps}


def test_replay_rows_label_the_coordinators_own_path(tmp_path: Path) -> None:
    with pytest.raises(TeamTRError, match="eval_transcripts.jsonl is missing"):
        od.replay_rows(tmp_path)
    noop = lambda s: next(i for i, c in enumerate(s.candidates) if c.text == NOOP.text)  # noqa: E731
    episodes = [_episode("forced_coordination", od.HELD_OUT, lambda s: s.expert),
                _episode("cramped_room", od.HELD_OUT, noop), _episode("cramped_room", od.HELD_OUT + 1, noop)]
    episodes.append({"policy": "heuristic @ layout=cramped_room", "seed": 0, "steps": []})  # not replayed
    (tmp_path / "eval_transcripts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    rows = od.replay_rows(tmp_path)
    assert sorted(rows) == [f"{tmp_path}: trained @ layout={L}" for L in ("cramped_room", "forced_coordination")]
    fc, cr = rows[f"{tmp_path}: trained @ layout=forced_coordination"], rows[f"{tmp_path}: trained @ layout=cramped_room"]
    assert fc["accuracy"] == 1.0 and fc["ambiguous"] == 0.0 and fc["episodes"] == 1.0
    assert fc["decisions"] == len(episodes[0]["steps"]) and fc["prompts"] < fc["decisions"]
    labels = [st["expert"] == st["choice"] for e in episodes[1:3] for st in e["steps"]]  # right where the label is the no-op
    assert cr["decisions"] == len(labels) and cr["accuracy"] == pytest.approx(sum(labels) / len(labels))
    assert cr["episodes"] == 2.0 and cr["new->noop"] == 1.0
    assert all(v == 1.0 for k, v in cr.items() if "->" in k) and all(k.endswith("->noop") for k in cr if "->" in k)
    episodes[1]["steps"][3]["state"] += " (edited)"
    (tmp_path / "eval_transcripts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    with pytest.raises(TeamTRError, match="does not replay at tick 3"):
        od.replay_rows(tmp_path)
