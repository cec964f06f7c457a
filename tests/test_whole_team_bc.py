"""Behaviour cloning in whole-team mode: each demonstration becomes the whole-team output that carries
it out (its directive on its agent's line, "carry on" elsewhere), cloned by its token log-probability."""

import json

import pytest
import torch

from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator
from teamtr.policy.whole_team import act_whole_team, grammar_decisions, score_whole_team, team_grammar
from teamtr.team import Team
from teamtr.train import bc as bc_mod
from teamtr.train.trainer import Trainer


def _team():
    return Team(make("escape-room", agents=2, items=2, max_steps=6))


def _demos(n, seed=0):
    return bc_mod.expert_demos(_team, n, seed=seed, parallel=4)


def test_a_demo_becomes_the_whole_team_output_that_carries_out_its_label():
    demos = _demos(40)
    addressed = 0
    for d in demos:
        view = bc_mod.whole_team_view(d)
        _, sources = team_grammar(view)
        choice = bc_mod.whole_team_label(d, sources)
        lines = [sources[a][o] for a, o in enumerate(choice) if sources[a][o] >= 0]
        target = d.targets[d.label]
        if target is not None and "+" not in target:
            addressed += 1
            assert [d.candidates[k] for k in lines] == [d.candidates[d.label]]  # one new line: the label
        else:
            assert lines == []  # the no-op: every line carries on
    assert addressed >= 10 and len(demos) - addressed >= 10  # both branches above ran


def test_the_loss_is_the_outputs_negative_log_probability_and_cloning_lowers_it():
    torch.manual_seed(0)
    coordinator = Coordinator(load_backbone("tiny-random", device="cpu"))
    demos = _demos(8)
    decisions, choices, tokens = bc_mod._whole_team_targets(coordinator, demos)
    with torch.no_grad():
        scores, _ = score_whole_team(coordinator, decisions, tokens)
        loss, _ = bc_mod._whole_team_step(coordinator, demos)
    assert float(loss) == pytest.approx(-float(scores.total.mean()), rel=1e-5)
    before = float(loss)
    metrics = bc_mod.behaviour_clone(coordinator, demos, epochs=40, batch_size=8, lr=1e-2, mode="whole_team",
                                     schedule="cosine", heldout=demos)
    with torch.no_grad():
        after, _ = bc_mod._whole_team_step(coordinator, demos)
    assert float(after) < 0.5 * before  # tiny-random: 3.06 -> 1.29
    # greedy whole-team decoding now writes the demonstrated outputs, and accuracy counts exactly that
    out = act_whole_team(coordinator, [bc_mod.whole_team_view(d) for d in demos], greedy=True)
    written = sum(int(tuple(o) == tuple(t)) for o, t in zip(out.tokens, tokens))
    assert metrics["bc/heldout_accuracy"] == pytest.approx(written / len(demos))
    assert written >= 2  # the tiny random model writes half of them (4 of 8) after 40 steps


def test_whole_team_cloning_refuses_demonstrations_without_targets(tmp_path):
    ep = {"task": "t", "steps": [{"state": "s", "candidates": ["agent_A: go", "no new directive"], "choice": 0}]}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(ep) + "\n")
    demos = bc_mod.file_demos([path])
    coordinator = Coordinator(load_backbone("tiny-random", device="cpu"))
    with pytest.raises(TeamTRError, match="carry none.*team.directives=single"):
        bc_mod.behaviour_clone(coordinator, demos, epochs=1, batch_size=1, lr=1e-3, mode="whole_team")
    with pytest.raises(TeamTRError, match="'poetry' mode is not supported"):
        bc_mod.behaviour_clone(coordinator, demos, epochs=1, batch_size=1, lr=1e-3, mode="poetry")
    with pytest.raises(TeamTRError, match="carry none"):  # free text needs the targets too
        bc_mod.behaviour_clone(coordinator, demos, epochs=1, batch_size=1, lr=1e-3, mode="free_text")


TINY = ["model.backbone=tiny-random", "rollout.episodes=2", "rollout.parallel=2", "train.iterations=0",
        "train.eval_every=0", "train.final_eval_episodes=0", "log.tensorboard=false", "env.max_steps=6",
        "env.agents=2", "env.items=2", "bc.enabled=true", "bc.demos=16", "bc.epochs=1", "bc.batch_size=8"]


@pytest.mark.parametrize("mode", ["single", "whole_team", "free_text"])
def test_the_trainer_clones_in_the_mode_training_starts_in(tmp_path, monkeypatch, mode):
    trainer = Trainer(load_config(None, [*TINY, f"run_dir={tmp_path / 'run'}", f"team.directives={mode}"]))
    seen, original = [], bc_mod.behaviour_clone
    monkeypatch.setattr(bc_mod, "behaviour_clone", lambda *a, **k: seen.append(k["mode"]) or original(*a, **k))
    trainer.warm_up()
    trainer.close()
    assert seen == [mode]  # the real cloning ran, in that mode
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert any("bc/heldout_accuracy" in x for x in lines)


def test_labels_with_no_whole_team_line_are_left_out_and_weights_count_once():
    pair = bc_mod.Demo("t", "s", (), ("agent_A: fix", "pair agent_A with agent_B", "no new directive"), 1,
                       targets=("agent_A", "agent_A+agent_B", None))
    noop = bc_mod.Demo("t", "s", (), pair.candidates, 2, targets=pair.targets)
    direct = bc_mod.Demo("t", "s", (), pair.candidates, 0, targets=pair.targets)
    assert [bc_mod.expressible(d) for d in (pair, noop, direct)] == [False, True, True]
    coordinator = Coordinator(load_backbone("tiny-random", device="cpu"))
    with pytest.raises(TeamTRError, match="none of the 2 demonstrations directs a single agent"):
        bc_mod.behaviour_clone(coordinator, [pair, noop], epochs=1, batch_size=2, lr=1e-3, mode="whole_team")
    # sampling already draws demonstrations by weight: the loss is the plain mean over the batch
    demos = _demos(4)
    heavy = [bc_mod.Demo(d.task, d.state, d.history, d.candidates, d.label, 3.0 if i == 0 else 1.0, d.targets)
             for i, d in enumerate(demos)]
    with torch.no_grad():
        a, _ = bc_mod._whole_team_step(coordinator, demos)
        b, _ = bc_mod._whole_team_step(coordinator, heavy)
    assert float(a) == pytest.approx(float(b), rel=1e-6)
