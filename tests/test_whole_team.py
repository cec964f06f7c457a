"""Whole-team directives: the Team takes one line per agent, the coordinator decodes valid outputs of
real worlds' states with exact log-probs, and the token-level PPO loss is right by hand and learns."""

import math

import pytest
import torch
from test_decoding import naive

from teamtr.core import NOOP, Directive
from teamtr.envs import make
from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator
from teamtr.policy.whole_team import (
    act_whole_team,
    dense,
    score_whole_team,
    team_grammar,
)
from teamtr.rl.losses import clipped_value_loss, token_policy_terms
from teamtr.team import Team, joint_directive


@pytest.fixture(scope="module")
def coord():
    torch.manual_seed(0)
    c = Coordinator(load_backbone("tiny-random", device="cpu"))
    with torch.no_grad():  # LoRA off zero, so the adapter matters
        for grp in c.policy_param_groups():
            for p in grp["params"]:
                p.add_(0.2 * torch.randn(p.shape))
    return c


def test_team_delivers_each_line_and_carry_on_keeps_the_directive():
    team = Team(make("escape-room", agents=3, items=3))
    state = team.reset(0)
    c = state.candidates
    names = team.world.agents
    a, b = (next(i for i, d in enumerate(c) if d.target == names[k] and d.task.startswith("fetch")
                 and team.world.check(names[k], d) is None) for k in (0, 1))
    _, _, _, info = team.step([a, b])
    agents = team.agents
    took = {e.agent for e in info["events"] if e.kind == "directive_followed"}
    assert took == {names[0], names[1]}
    assert agents[names[0]].directive == c[a] and agents[names[1]].directive == c[b]
    assert agents[names[2]].directive is None
    assert info["directive"] == joint_directive([c[a], c[b]])
    assert info["directive"].text == f"{c[a].text}\n{c[b].text}"
    assert info["directive"].target == f"{c[a].target}+{c[b].target}"
    _, _, _, info = team.step([])  # every line "carry on": the no-op, orders stay in force
    assert info["directive"] == NOOP and agents[names[0]].directive == c[a]
    with pytest.raises(Exception, match="outside the candidates"):
        team.step([99])


def _states(world: str, n: int, **options):
    return [Team(make(world, **options)).reset(seed) for seed in range(n)]


@pytest.mark.parametrize("world,options", [("escape-room", {"agents": 3}), ("escape-room", {"agents": 4}),
                                           ("software-team", {}),
                                           ("escape-room", {"agents": 3, "names": "fresh"})])  # 40 prefixes, one batch
def test_decoded_whole_team_outputs_are_valid_and_exact(coord, world, options):
    states = _states(world, 40, **options)
    g = torch.Generator().manual_seed(1)
    out = act_whole_team(coord, states, generator=g)
    assert out.values.shape == (40,)
    changed = 0
    for k, s in enumerate(states):
        grammar, _ = team_grammar(s)
        assert len({s.candidates[i].target for i in out.lines[k]}) == len(out.lines[k])  # one line per agent
        assert all(s.candidates[i].target in grammar.agents for i in out.lines[k])
        team = Team(make(world, **options))
        team.reset(k)
        team.step(out.lines[k])  # the team takes it
        changed += bool(out.lines[k])
    assert changed > 20
    scores = out.scores
    model = coord.backbone.model
    for k in range(0, 40, 8):  # naive full-sequence score of the same output
        prefix, dec = out.decisions[k]
        lp, ent, _ = naive(model, prefix, dec, out.tokens[k])
        n = len(out.tokens[k])
        assert abs(float(scores.logp[k].sum()) - float(lp.sum())) < 1e-4
        assert torch.allclose(scores.entropy[k, :n], ent, atol=1e-4)
    if options.get("names") == "fresh":  # the teacher-forced pass of the update folds them the same way
        again, _ = score_whole_team(coord, out.decisions, out.tokens)
        assert len({p for p, _ in out.decisions}) == 40
        assert torch.allclose(again.logp, scores.logp, atol=1e-4)


def test_token_loss_by_hand():
    # one decision, three tokens: forced, then two branching tokens of 2 valid tokens each
    new = torch.log(torch.tensor([[[1.0, 0.0], [0.5, 0.5], [0.8, 0.2]]]))
    old = torch.log(torch.tensor([[[1.0, 0.0], [0.25, 0.75], [0.8, 0.2]]]))
    valid = torch.tensor([[[True, False], [True, True], [True, True]]])
    branching = torch.tensor([[False, True, True]])
    taken = torch.tensor([[0, 0, 1]])
    new_logp = new.gather(2, taken[..., None]).squeeze(-1) * branching
    old_logp = old.gather(2, taken[..., None]).squeeze(-1) * branching
    adv = torch.tensor([1.0])
    tok = token_policy_terms(new_logp, old_logp, new, old, old, valid, branching, adv, clip_eps=0.2,
                             ent_coef=0.0, kl_coef=0.0)
    # token ratios 2.0 (clipped to 1.2) and 1.0: mean of 1.2 and 1.0
    assert float(tok.surrogate) == pytest.approx(1.1)
    seq = token_policy_terms(new_logp, old_logp, new, old, old, valid, branching, adv, clip_eps=0.2,
                             ent_coef=0.0, kl_coef=0.0, token_level=False)
    assert float(seq.surrogate) == pytest.approx(1.2)  # one ratio 2 * 1, clipped
    h = math.log(2) + -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    assert float(tok.entropy) == pytest.approx(h / 2)
    kl = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert float(tok.kl_old_new) == pytest.approx(kl / 2) and float(tok.kl_ref_new) == pytest.approx(kl / 2)
    assert float(tok.clip_frac) == pytest.approx(0.5) and float(seq.clip_frac) == 1.0
    new.requires_grad_(True)
    t = token_policy_terms(new_logp, old_logp, new, old, old, valid, branching, adv, clip_eps=0.2,
                           ent_coef=0.1, kl_coef=0.1)
    t.objective.backward()
    assert torch.isfinite(new.grad).all()  # the -inf of invalid tokens never reaches a gradient


@pytest.mark.parametrize("token_level", [True, False])
def test_whole_team_ppo_update_decreases_the_loss_on_a_fixed_batch(token_level):
    torch.manual_seed(0)
    c = Coordinator(load_backbone("tiny-random", device="cpu"))
    states = _states("escape-room", 8, agents=3)
    out = act_whole_team(c, states, generator=torch.Generator().manual_seed(2))
    old = out.scores
    rows = list(range(len(states)))
    old_branch, valid = dense(old)
    adv = torch.linspace(-1, 1, len(rows))
    returns = adv.clone()
    params = [p for g in c.policy_param_groups() for p in g["params"]] + c.value_parameters()
    opt = torch.optim.Adam(params, lr=3e-3)
    losses = []
    for _ in range(6):
        s, values = score_whole_team(c, [out.decisions[i] for i in rows], [out.tokens[i] for i in rows])
        new_branch, _ = dense(s)
        t = token_policy_terms(s.logp, old.logp, new_branch, old_branch, old_branch, valid, s.branching, adv,
                               clip_eps=0.2, ent_coef=0.0, kl_coef=0.05, token_level=token_level)
        loss = -t.objective + 0.5 * clipped_value_loss(values, out.values[rows], returns, 0.2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    # at ratio 1 with V = 0: minus the advantages' mean (per branching token, or per decision) + vf 0.5 * 0.5 E[R^2]
    n = old.branching.sum(1).float()
    surrogate = float((adv * n).sum() / n.sum()) if token_level else float(adv.mean())
    assert losses[0] == pytest.approx(-surrogate + 0.25 * float((returns ** 2).mean()), abs=1e-5)
    assert losses[-1] < losses[0] - 0.01, losses
    with torch.no_grad():
        after, _ = score_whole_team(c, [out.decisions[i] for i in rows], [out.tokens[i] for i in rows])
    # the update moved the policy towards the outputs with positive advantage
    assert float((adv * after.total).sum()) > float((adv * old.total).sum()) + 0.05


@pytest.mark.parametrize("token_level", ["true", "false"])
def test_trainer_runs_whole_team_mode(tmp_path, token_level):
    import json

    from teamtr.config import load_config
    from teamtr.train.trainer import Trainer

    config = load_config(None, [
        "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=4", "rollout.parallel=4",
        "train.iterations=1", "train.eval_every=1", "train.eval_episodes=4", "train.checkpoint_every=1",
        "train.final_eval_episodes=0",
        "algo.minibatch_size=8", "algo.epochs=2", "log.tensorboard=false", "env.max_steps=4", "env.agents=3",
        "team.directives=whole_team", f"algo.token_level={token_level}", "algo.kl_coef=0.05",
        "algo.warmup_updates=0", f"run_dir={tmp_path / 'run'}"])
    with Trainer(config) as trainer:
        trainer.run()
        assert trainer.collector.actor.store == []  # the update used and dropped its decisions
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    line = next(x for x in lines if "perf/decisions" in x)
    assert any("eval/success" in x for x in lines)  # held-out episodes in whole-team mode too
    assert line["perf/decisions"] == 16  # 4 episodes x 4 decisions: nobody escapes in 4 ticks untrained
    for key in ("policy/loss", "value/loss", "policy/entropy", "policy/kl_old_new", "policy/kl_ref_new"):
        assert math.isfinite(line[key]), key
    assert line["policy/entropy"] > 0.1 and line["policy/kl_old_new"] > 0
    step = json.loads((tmp_path / "run" / "transcripts.jsonl").read_text().splitlines()[0])["steps"][0]
    assert all(0 <= i < len(step["candidates"]) for i in step["lines"])


def test_a_state_without_single_agent_candidates_gets_a_forced_carry_on(coord):
    from teamtr.policy.prompts import Decision

    goal = Directive("team: ship it", None, "goal:ship", "goal")
    d = Decision(task="t", state="s", history=(), candidates=(goal, NOOP))
    grammar, sources = team_grammar(d)
    assert grammar.options == (("team: carry on",),) and sources == ((-1,),)
    out = act_whole_team(coord, [d])
    assert out.lines == [[]] and float(out.scores.logp.sum()) == 0.0
