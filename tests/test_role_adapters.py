"""Role adapters: one PEFT adapter per LLM-agent role on the coordinator's base model, behaviour-cloned
on the scripted agents' choices; gradients never cross between them and the coordinator's adapter;
saved, validated, restored and resumed bit-exactly."""

from __future__ import annotations

import json

import pytest
import torch

from teamtr.agents.chooser import role_word
from teamtr.agents.llm import ChoicePrompt, LLMResolver
from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.eval.evaluate import run_episodes
from teamtr.eval.policies import OraclePolicy
from teamtr.eval.team_agents import agent_factory
from teamtr.policy.choices import ChoiceScorer
from teamtr.policy.coordinator import build_coordinator
from teamtr.train import bc as bc_mod
from teamtr.train import roles as roles_mod
from teamtr.rl import AlgoConfig, make_algorithm
from teamtr.train.checkpoint import latest_checkpoint, save_checkpoint, validate_checkpoint
from teamtr.team import Team
from teamtr.train.trainer import Trainer

ROLES = ["model.backbone=tiny-random", "model.device=cpu", "team.agents.default=llm",
         "team.llm.role_adapters.enabled=true", "team.llm.role_adapters.demos=24", "team.llm.role_adapters.heldout=24",
         "team.llm.role_adapters.eval_episodes=0", "team.llm.role_adapters.epochs=2",
         "team.llm.role_adapters.batch_size=8", "team.llm.role_adapters.lr=0.01"]
SOFTWARE = [*ROLES, "env.name=software-team", "env.deadline=10"]
PROMPTS = [ChoicePrompt("Rules.", "You are engineer_1.\nIn the lab.", ("wait", "write module"), "engineer"),
           ChoicePrompt("Rules.", "You are qa.\nIn the lab.", ("wait", "test module", "report bug"), "qa"),
           ChoicePrompt("Rules.", "You are engineer_2.\nIdle.", ("wait", "review"), "engineer"),
           ChoicePrompt("Rules.", "You are qa.\nIdle.", ("wait", "test module"), None)]


def coordinator_with_roles(*sets: str):
    config = load_config(None, [*SOFTWARE, *sets])
    coord = build_coordinator(config)
    roles_mod.attach(config, coord)
    return config, coord


def own_state(coord) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in coord.adapter_state().items()} | {
        f"value.{k}": v.clone() for k, v in coord.value_head.state_dict().items()}


def role_state(coord) -> dict[str, torch.Tensor]:
    return {f"{r}.{k}": v.clone() for r in coord.roles.roles for k, v in coord.roles.state(r).items()}


def perturb_roles(coord, by: float = 0.3) -> None:
    with torch.no_grad():
        for role in coord.roles.roles:
            for p in coord.roles.parameters(role):
                p.add_(by)
    coord.weights_changed()


def test_config_refuses_role_adapters_without_llm_agents_or_on_another_backbone():
    with pytest.raises(TeamTRError, match="team.llm.role_adapters.enabled is true but no role agent is an llm agent"):
        load_config(None, ["team.llm.role_adapters.enabled=true"])
    with pytest.raises(TeamTRError, match="team.llm.backbone=same"):
        load_config(None, ["team.llm.role_adapters.enabled=true", "team.agents.qa=llm", "env.name=software-team",
                           "team.llm.backbone=tiny-random"])
    with pytest.raises(TeamTRError, match="team.llm.role_adapters.demos"):
        load_config(None, ["team.llm.role_adapters.demos=0"])
    assert load_config(None, []).team.llm.role_adapters.enabled is False  # off by default


def test_adding_role_adapters_changes_neither_the_coordinator_nor_the_random_stream():
    config = load_config(None, SOFTWARE)
    coord = build_coordinator(config)
    team_states = [Team(make("software-team")).reset(s) for s in range(2)]
    before = coord.act(team_states, greedy=True)
    groups = [[p.data_ptr() for p in g["params"]] for g in coord.policy_param_groups()]
    rng = torch.random.get_rng_state()
    assert roles_mod.attach(config, coord) == ["architect", "engineer", "product manager", "qa"]
    assert torch.equal(torch.random.get_rng_state(), rng)
    perturb_roles(coord)
    after = coord.act(team_states, greedy=True)
    assert torch.equal(before.logp, after.logp) and torch.equal(before.values, after.values)
    assert [[p.data_ptr() for p in g["params"]] for g in coord.policy_param_groups()] == groups
    coord.train_only_top(1)  # freezing the coordinator's lower layers leaves the roles' flags alone
    assert not any(p.requires_grad for r in coord.roles.roles for p in coord.roles.parameters(r))


def test_role_prompts_score_with_base_plus_their_adapter_one_pass_per_role():
    _, coord = coordinator_with_roles()
    with torch.no_grad():
        for g in coord.policy_param_groups():
            for p in g["params"]:
                p.add_(0.5)  # the coordinator's own adapter far from zero: it must not leak into role scores
    score = ChoiceScorer.of_coordinator(coord)
    base = score([ChoicePrompt(p.system, p.user, p.options) for p in PROMPTS])
    zero = score(PROMPTS)  # fresh role adapters (B = 0) are the base model
    assert all(a == pytest.approx(b, abs=1e-5) for a, b in zip(zero, base))
    perturb_roles(coord, 0.05)
    passes = []
    forward = coord.scorer.forward
    coord.scorer.forward = lambda *a, **k: passes.append(coord.peft.active_adapter) or forward(*a, **k)
    together = score(PROMPTS)
    assert sorted(passes) == ["default", "role_engineer", "role_qa"]  # one pass per role, and one for the base
    alone = [score([p])[0] for p in PROMPTS]
    assert all(a == pytest.approx(b, abs=1e-5) for a, b in zip(together, alone))
    assert max(abs(x - y) for x, y in zip(together[0], base[0])) > 1e-3
    assert together[3] == pytest.approx(base[3], abs=1e-5)
    with coord.merged():  # inside a merged evaluation the coordinator's adapter stays out of role scores
        assert all(a == pytest.approx(b, abs=1e-4) for a, b in zip(score(PROMPTS[:2]), together[:2]))


def test_the_resolver_asks_each_agents_role_in_one_call_per_tick():
    config, coord = coordinator_with_roles()
    factory = agent_factory(config, coord)
    resolver = factory.resolvers["llm"]
    assert isinstance(resolver, LLMResolver) and resolver.role_of("engineer_2") == "engineer"
    passes: list[str] = []
    forward = coord.scorer.forward
    coord.scorer.forward = lambda *a, **k: passes.append(coord.peft.active_adapter) or forward(*a, **k)
    run_episodes("software-team", {"deadline": 12}, OraclePolicy(), [0, 1], make_agent=factory)
    assert resolver.calls > 0 and resolver.scored > resolver.calls  # both teams' agents in each call
    assert set(passes) <= {"role_architect", "role_engineer", "role_product_manager", "role_qa"}
    # the untuned product manager never finishes the spec: its role alone acts, one pass per tick
    assert passes == ["role_product_manager"] * resolver.calls
    with pytest.raises(TeamTRError, match="carries no role adapters"):
        agent_factory(config, build_coordinator(config))
    with pytest.raises(TeamTRError, match="role 'wizard' has no role adapter.*architect, engineer"):
        coord.roles.name_of(role_word("wizard_1"))


def test_tuning_moves_only_the_role_adapters_and_raises_agreement():
    config, coord = coordinator_with_roles()
    demos = roles_mod.collect(config, 24, 0)
    heldout = roles_mod.collect(config, 24, 10_000)
    assert {d.role for d in demos} == {"architect", "engineer", "product manager", "qa"}
    assert all(0 <= d.label < len(d.options) and len(d.options) > 1 for d in demos)
    own, roles = own_state(coord), role_state(coord)
    before = roles_mod.agreement(coord, heldout, tuned=False)
    assert roles_mod.agreement(coord, heldout, tuned=True) == before  # untrained adapters are the base model
    roles_mod.tune(coord, demos, epochs=2, batch_size=12, lr=0.01)
    after = roles_mod.agreement(coord, heldout, tuned=True)
    assert all(torch.equal(v, own_state(coord)[k]) for k, v in own.items())
    assert all(p.grad is None for g in coord.policy_param_groups() for p in g["params"])
    moved = role_state(coord)
    assert all(not torch.equal(moved[k], v) for k, v in roles.items() if ".lora_B." in k)
    mean = lambda a: sum(roles_mod._roles_only(a).values()) / 4  # noqa: E731
    assert mean(after) > mean(before) + 0.15, (before, after)
    for role in ("architect", "engineer", "product manager", "qa"):  # per kind of scripted action too
        verbs = {d.options[d.label].split(" ", 1)[0] for d in heldout if d.role == role}
        shares = {v: sum(d.role == role and d.options[d.label].startswith(v + " ") or d.role == role
                         and d.options[d.label] == v for d in heldout) for v in verbs}
        assert set(k for k in after if k.startswith(role + "/")) == {f"{role}/{v}" for v in verbs}
        total = sum(shares.values())
        assert sum(after[f"{role}/{v}"] * n for v, n in shares.items()) / total == pytest.approx(after[role])
    # and the other way: the coordinator's behaviour cloning leaves the role adapters as they are
    coord_demos = bc_mod.expert_demos(lambda: Team(make("software-team", deadline=10)), 8, seed=0)
    bc_mod.behaviour_clone(coord, coord_demos, epochs=1, batch_size=4, lr=0.01)
    assert not all(torch.equal(v, own_state(coord)[k]) for k, v in own.items())
    assert all(torch.equal(v, role_state(coord)[k]) for k, v in moved.items())
    assert all(p.grad is None for r in coord.roles.roles for p in coord.roles.parameters(r))


def test_role_adapters_round_trip_with_the_coordinator_and_damage_is_found(tmp_path):
    config, coord = coordinator_with_roles()
    perturb_roles(coord, 0.05)
    score = ChoiceScorer.of_coordinator(coord)
    want = score(PROMPTS)
    coord.save(tmp_path / "c")
    assert sorted(p.name for p in (tmp_path / "c" / "adapter").iterdir()) == [
        "README.md", "adapter_config.json", "adapter_model.safetensors"]  # the coordinator's alone
    assert json.loads((tmp_path / "c" / "roles" / "roles.json").read_text())["roles"]["qa"] == "role_qa"
    fresh = build_coordinator(config)
    fresh.load(tmp_path / "c")
    assert fresh.roles.roles == coord.roles.roles
    assert ChoiceScorer.of_coordinator(fresh)(PROMPTS) == want
    # a checkpoint whose role adapter file is torn is not complete
    algo = make_algorithm("ppo", coord.policy_param_groups(), coord.value_parameters(), AlgoConfig())
    path = save_checkpoint(tmp_path, 1, coord, algo, {"iteration": 1})
    assert validate_checkpoint(path) is None
    f = path / "coordinator" / "roles" / "role_qa" / "adapter_model.safetensors"
    f.write_bytes(f.read_bytes()[:40])
    assert "role_qa" in validate_checkpoint(path)


TRAIN = [*ROLES, "env.max_steps=6", "bc.enabled=false", "rollout.episodes=4", "rollout.parallel=4",
         "train.eval_every=0", "train.checkpoint_every=1", "train.final_eval_episodes=0", "algo.minibatch_size=16",
         "algo.epochs=1", "log.tensorboard=false", "team.llm.role_adapters.demos=8",
         "team.llm.role_adapters.heldout=8", "team.llm.role_adapters.eval_episodes=2"]


def _lines(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in rows]


def test_train_tunes_the_roles_first_then_resumes_bit_exactly(tmp_path):
    run, ref = tmp_path / "run", tmp_path / "ref"
    with Trainer(load_config(None, [*TRAIN, "train.iterations=1", f"run_dir={run}"])) as first:
        first.run()
    rows = _lines(run)
    summary = [r for r in rows if r["kind"] == "roles" and "roles/agreement_after" in r]
    assert len(summary) == 1 and 0 <= summary[0]["roles/agreement_before"] <= 1
    assert summary[0]["roles/agreement_after/agent"] == summary[0]["roles/agreement_after"]
    assert {"roles/oracle_success_untuned", "roles/oracle_success_tuned"} <= set(summary[0])
    with Trainer(load_config(None, [*TRAIN, "train.iterations=2", f"run_dir={run}"]), resume=True) as resumed:
        assert resumed.roles_done
        resumed.run()
    with Trainer(load_config(None, [*TRAIN, "train.iterations=2", f"run_dir={ref}"])) as whole:
        whole.run()
    assert _lines(run) == _lines(ref)  # the roles stage ran once, and the resumed iteration matches
    final = latest_checkpoint(run).relative_to(run)
    for f in ("coordinator/adapter/adapter_model.safetensors", "coordinator/roles/role_agent/adapter_model.safetensors"):
        assert (run / final / f).read_bytes() == (ref / final / f).read_bytes()
