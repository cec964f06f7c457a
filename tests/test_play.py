"""`teamtr play`: directive numbers stay put within an episode, typed numbers and texts pick the
directive shown, and a trained coordinator suggests its top 3 and can play on its own."""

import io
import re

import pytest
import torch

from teamtr.cli import main
from teamtr.envs import make
from teamtr.play import StableNumbers, pick, top
from teamtr.team import Team

SMALL = ["--set", "env.agents=2", "--set", "env.items=2"]


def oracle_episode(seed: int = 0):
    """(state, chosen index) of the expert's episode on the small world, as play's team plays it."""
    team = Team(make("escape-room", agents=2, items=2), history_len=1)
    state, out, done = team.reset(seed), [], False
    while not done:
        out.append((state, state.expert))
        state, _, done, _ = team.step(state.expert)
    return out


def test_numbers_are_stable_within_an_episode():
    numbers, seen = StableNumbers(), {}
    episode = oracle_episode()
    lists = set()
    for state, _ in episode:
        listing = numbers.listing(state)
        lists.add(tuple(state.candidates[i].text for _, i in listing))
        for number, index in listing:
            text = state.candidates[index].text
            assert seen.setdefault(text, number) == number  # a directive never changes its number
            assert (number == 0) == (state.candidates[index].kind == "noop")
        assert len({n for n, _ in listing}) == len(listing)  # no two directives share a number
    assert len(lists) > 1  # the candidate list did change over the episode


def test_pick_accepts_numbers_texts_and_unique_starts():
    state = oracle_episode()[0][0]
    numbers = StableNumbers()
    listing = numbers.listing(state)
    number, index = listing[-1]
    assert pick(str(number), state, numbers) == index
    assert pick("0", state, numbers) == len(state.candidates) - 1  # the no-op
    assert pick(state.candidates[index].text.upper(), state, numbers) == index
    assert "no directive 99" in pick("99", state, numbers)
    agent = state.candidates[0].text.split(":")[0]
    assert "starts" in pick(agent, state, numbers)  # every directive to that agent starts so
    assert "no new" in state.candidates[pick("no new", state, numbers)].text
    assert "is no directive" in pick("dance", state, numbers)
    assert top([0.1, 0.5, 0.2, 0.2]) == [1, 2, 3]


def test_piped_numbers_play_the_directives_they_were_shown_with(monkeypatch, capsys):
    numbers = StableNumbers()
    answers = []
    for state, choice in oracle_episode():
        numbers.listing(state)  # the numbers play shows, in the order it shows them
        answers.append(str(numbers.number(state.candidates[choice])))
    monkeypatch.setattr("sys.stdin", io.StringIO("bogus\n" + "\n".join(answers) + "\n"))
    assert main(["play", "escape-room", *SMALL, "--set", "team.history_len=1"]) == 0
    out = capsys.readouterr().out
    assert "'bogus' is no directive now" in out
    assert "episode over: success" in out
    assert len(re.findall(r"you chose \d+\. ", out)) == len(answers)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from teamtr.policy.backbone import load_backbone
    from teamtr.policy.coordinator import Coordinator

    coord = Coordinator(load_backbone("tiny-random", device="cpu"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for group in coord.policy_param_groups():
            for p in group["params"]:
                p.add_(0.5 * torch.randn(p.shape, generator=g))
    folder = tmp_path_factory.mktemp("play") / "coordinator"
    coord.save(folder)
    return folder, coord


def test_auto_play_follows_the_coordinators_top_suggestion(checkpoint, capsys):
    folder, coord = checkpoint
    args = ["play", "escape-room", *SMALL, "--set", "env.max_steps=4", "--set", "model.backbone=tiny-random",
            "--checkpoint", str(folder), "--auto"]
    assert main(args) == 0
    out = capsys.readouterr().out
    suggested = re.findall(r"^coordinator suggests: (.*)$", out, re.M)
    played = re.findall(r"^coordinator plays (\d+)\. (.*)$", out, re.M)
    assert len(suggested) == len(played) >= 1 and "episode over" in out
    for line, (number, text) in zip(suggested, played):
        first = re.findall(r"(\d+)\. ([^,]*?) \((\d\.\d\d)\)", line)
        assert len(first) == 3 and first[0][:2] == (number, text)  # it plays its top suggestion
        assert [float(p) for *_, p in first] == sorted((float(p) for *_, p in first), reverse=True)
    # the first suggestion's probability is the coordinator's own for the first state
    state = Team(make("escape-room", agents=2, items=2, max_steps=4), history_len=1).reset(0)
    logp = coord.act([state], greedy=True).logp[0, : len(state.candidates)]
    best = int(logp.argmax())
    assert played[0][1] == state.candidates[best].text
    assert f"({float(logp[best].exp()):.2f})" in suggested[0]


def test_auto_needs_a_checkpoint(capsys):
    assert main(["play", "escape-room", "--auto"]) == 2
    assert "--auto needs --checkpoint" in capsys.readouterr().err
