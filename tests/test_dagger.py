"""DAgger (Ross et al. 2011): the clone acts, the oracle labels the states it reaches, the clone is trained
again on every demonstration so far (``bc.dagger_rounds``)."""

import json
from types import SimpleNamespace

import pytest
import torch

from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator
from teamtr.team import Team, TeamBatch
from teamtr.train import bc as bc_mod
from teamtr.train.trainer import Trainer


def _team():
    return Team(make("escape-room", agents=2, items=2, max_steps=6))


class _Picks:
    """A learner that chooses by a rule over the states (``act`` as a coordinator's, greedy)."""

    def __init__(self, rule):
        self.rule, self.calls = rule, 0

    def act(self, states, greedy=False):
        assert greedy
        self.calls += 1
        return SimpleNamespace(choices=[self.rule(s) for s in states])


@pytest.mark.parametrize("explore", [0.0, 0.3])
def test_a_learner_that_acts_as_the_oracle_collects_the_oracles_demonstrations(explore):
    expert = bc_mod.expert_demos(_team, 40, seed=7, explore=explore, parallel=4)
    learner = _Picks(lambda s: s.expert)
    demos, agreement = bc_mod.learner_demos(learner, _team, 40, seed=7, explore=explore, parallel=4)
    assert demos == expert  # same states, same labels, same random slips
    assert agreement == 1.0
    assert learner.calls > 0


def test_the_learner_walks_its_own_path_and_the_oracle_labels_it():
    demos, agreement = bc_mod.learner_demos(_Picks(lambda s: 0), _team, 30, seed=3, parallel=3)
    expert = bc_mod.expert_demos(_team, 30, seed=3, parallel=3)
    assert [d.state for d in demos] != [d.state for d in expert]  # states off the oracle's path
    assert agreement == pytest.approx(sum(d.label == 0 for d in demos) / 30)
    assert 0 < agreement < 1
    # replay: the same seeds, always the first candidate; every label is the oracle's choice there
    replayed, next_seed = [], 3
    while len(replayed) < 30:
        batch = TeamBatch([_team() for _ in range(3)])
        batch.reset(list(range(next_seed, next_seed + 3)))
        next_seed += 3
        while batch.live() and len(replayed) < 30:
            states = batch.states()
            replayed += [(s.state, s.expert) for s in states]
            batch.step([0] * len(states))
    assert [(d.state, d.label) for d in demos] == replayed[:30]


def test_a_real_clones_agreement_is_its_accuracy_on_the_states_it_reached():
    torch.manual_seed(0)
    coordinator = Coordinator(load_backbone("tiny-random", device="cpu"))
    first = bc_mod.expert_demos(_team, 32, seed=0, parallel=4)
    bc_mod.behaviour_clone(coordinator, first, epochs=3, batch_size=8, lr=1e-2)
    demos, agreement = bc_mod.learner_demos(coordinator, _team, 24, seed=100, parallel=4)
    assert len(demos) == 24
    # the clone acted greedily on exactly these states: its accuracy on their labels is the agreement
    # (up to one decision: batches of a different make-up can flip a near tie)
    assert abs(bc_mod.accuracy(coordinator, demos) - agreement) <= 1 / 24 + 1e-9
    assert {d.state for d in demos} - {d.state for d in first}  # it reached states the oracle's path did not


TINY = ["model.backbone=tiny-random", "rollout.episodes=2", "rollout.parallel=2", "train.iterations=0",
        "train.eval_every=0", "train.final_eval_episodes=0", "log.tensorboard=false", "env.max_steps=6",
        "env.agents=2", "env.items=2", "bc.enabled=true", "bc.demos=16", "bc.epochs=2", "bc.batch_size=8"]


def test_the_trainer_runs_dagger_rounds_after_the_first_clone(tmp_path):
    trainer = Trainer(load_config(None, [*TINY, f"run_dir={tmp_path / 'run'}", "bc.dagger_rounds=2"]))
    trainer.warm_up()
    trainer.close()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    bc = [x for x in lines if "bc/loss" in x]
    # first clone: 2 epochs x 16 // 8 = 4 steps; each round: 2 x 16 new // 8 = 4 more, numbered on
    assert [x["bc/step"] if "bc/step" in x else x["step"] for x in bc] == list(range(1, 13))
    rounds = [x for x in bc if "bc/dagger_round" in x]
    assert [x["bc/dagger_round"] for x in rounds] == [1.0, 2.0]
    assert [x["bc/demos"] for x in rounds] == [32.0, 48.0]
    assert all(0.0 <= x["bc/dagger_agreement"] <= 1.0 for x in rounds)
    assert sum("bc/heldout_accuracy" in x for x in bc) >= 3  # each cloning reports its held-out accuracy


def test_dagger_rounds_have_their_own_epochs_and_world(tmp_path, monkeypatch):
    worlds = []  # the world options each round's episodes were played in

    def collect(coordinator, make_team, n, **kw):
        worlds.append((make_team().world.max_steps, len(make_team().world.agents)))
        return real(coordinator, make_team, n, **kw)

    real = bc_mod.learner_demos
    monkeypatch.setattr(bc_mod, "learner_demos", collect)
    trainer = Trainer(load_config(None, [*TINY, f"run_dir={tmp_path / 'run'}", "bc.dagger_rounds=2",
                                         "bc.dagger_epochs=1", "bc.dagger_env.max_steps=3"]))
    trainer.warm_up()
    trainer.close()
    assert worlds == [(3, 2), (3, 2)]  # dagger_env over the training world (env.max_steps=6, 2 agents)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    # first clone: 2 epochs x 16 // 8 = 4 steps; each round: 1 epoch x 16 new // 8 = 2 more
    assert [x["bc/step"] if "bc/step" in x else x["step"] for x in lines if "bc/loss" in x] == list(range(1, 9))
    with pytest.raises(TeamTRError, match="dagger_env changes the world's options, not env.name"):
        load_config(None, [*TINY, "bc.dagger_env.name=overcooked"])


def test_dagger_needs_single_directives_where_training_starts():
    with pytest.raises(TeamTRError, match="bc.dagger_rounds=1 needs single directives"):
        load_config(None, [*TINY, "bc.dagger_rounds=1", "team.directives=whole_team"])
    load_config(None, [*TINY, "bc.dagger_rounds=1"])  # single: fine
    with pytest.raises(TeamTRError, match="set bc.dagger_demos"):
        load_config(None, [*TINY, "bc.dagger_rounds=1", "bc.demos=0"])
    assert load_config(None, [*TINY, "bc.dagger_rounds=1", "bc.demos=0", "bc.dagger_demos=8"]).bc.dagger_demos == 8
    load_config(None, [*TINY, "bc.dagger_rounds=0", "team.directives=whole_team"])  # no DAgger: fine


def test_behaviour_clone_runs_the_steps_asked_for():
    torch.manual_seed(0)
    coordinator = Coordinator(load_backbone("tiny-random", device="cpu"))
    demos = bc_mod.expert_demos(_team, 16, seed=0, parallel=4)
    assert bc_mod.behaviour_clone(coordinator, demos, epochs=1, batch_size=8, lr=1e-3, steps=5)["bc/step"] == 5
    with pytest.raises(TeamTRError, match="0 steps"):
        bc_mod.behaviour_clone(coordinator, demos, epochs=1, batch_size=8, lr=1e-3, steps=0)


def _noop_heavy_demos():
    """Eight labelled copies of one state: six say "no new directive", two a directive."""
    go = bc_mod.Demo(task="A team opens a door.", state="agent_A stands by the door.", history=(),
                     candidates=("agent_A: open the door", "no new directive"), label=0)
    wait = bc_mod.Demo(**{**go.__dict__, "label": 1})
    return [wait] * 6 + [go] * 2, go


def test_noop_weight_draws_demonstrations_that_say_nothing_new_less_often():
    demos, go = _noop_heavy_demos()
    assert [bc_mod.says_nothing_new(d) for d in demos] == [True] * 6 + [False] * 2
    assert bc_mod.sampling_weights(demos, 0.25).tolist() == [0.25] * 6 + [1.0] * 2
    whole = bc_mod.Demo(**{**go.__dict__, "lines": ()})  # whole team: no line, every agent carries on
    assert bc_mod.says_nothing_new(whole) and not bc_mod.says_nothing_new(bc_mod.Demo(**{**go.__dict__, "lines": (0,)}))
    picks = {}
    for weight in (1.0, 0.1):  # the clone's greedy choice follows the label it drew most
        torch.manual_seed(0)
        coordinator = Coordinator(load_backbone("tiny-random", device="cpu"))
        bc_mod.behaviour_clone(coordinator, demos, epochs=1, batch_size=4, lr=1e-2, steps=20, noop_weight=weight)
        picks[weight] = bc_mod.accuracy(coordinator, [go])
    assert picks == {1.0: 0.0, 0.1: 1.0}  # 6:2 draws the no-op; 0.6:2 the directive
    with pytest.raises(TeamTRError, match="bc.noop_weight = 0"):
        bc_mod.behaviour_clone(coordinator, demos, epochs=1, batch_size=4, lr=1e-2, noop_weight=0)
    with pytest.raises(TeamTRError, match="noop_weight"):
        load_config(None, [*TINY, "bc.noop_weight=0"])
