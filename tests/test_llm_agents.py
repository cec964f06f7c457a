"""Local LLM role agents: one scoring call per tick for every agent of every team, the same play
batched or alone, followed/ignored judged by the first action, exact base-model scores, mixed teams."""

from __future__ import annotations

import zlib

import pytest
import torch

from teamtr.agents.chooser import Answer, role_word
from teamtr.agents.llm import ChoicePrompt, LLMAgent, LLMResolver
from teamtr.agents.mixed import MixedTeam
from teamtr.agents.scripted import ScriptedAgent
from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.eval.evaluate import run_episodes
from teamtr.eval.policies import OraclePolicy
from teamtr.eval.team_agents import agent_factory, check_team
from teamtr.policy.backbone import load_backbone
from teamtr.policy.choices import ChoiceScorer
from teamtr.policy.coordinator import Coordinator
from teamtr.policy.scoring import EncodedDecision, score_naive
from teamtr.team import Team, TeamBatch


class HashScore:
    """A deterministic stand-in model: each option's score is a hash of (prompt, option)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, prompts):
        self.calls.append(len(prompts))
        return [[zlib.crc32(f"{p.user}|{o}".encode()) / 2**32 for o in p.options] for p in prompts]


class Prefer:
    """A model that always likes ``action`` best."""

    def __init__(self, action: str) -> None:
        self.action = action

    def __call__(self, prompts):
        return [[1.0 if o == self.action else 0.0 for o in p.options] for p in prompts]


class Planner:
    """A resolver that answers what the world's planner would do (a perfectly obedient model)."""

    def resolve(self, requests):
        return [Answer(r.actions.index(r.fallback) if r.fallback in r.actions else None) for r in requests]


def play(teams, seeds, batched: bool):
    """Expert choices until every team ends; per team the (reward, sorted event kinds) per decision."""
    out = [[] for _ in teams]
    batch = TeamBatch(teams)
    batch.reset(seeds)
    while live := batch.live():
        if batched:
            results = batch.step([batch.teams[i].state.expert for i in live])
        else:
            results = [batch.teams[i].step(batch.teams[i].state.expert) for i in live]
        for i, (_, reward, _, info) in zip(live, results):
            out[i].append((round(reward, 9), sorted(e.kind for e in info["events"])))
    return out


@pytest.mark.parametrize("world", ["escape-room", "software-team"])
def test_a_model_that_picks_the_planners_action_plays_exactly_like_scripted_agents(world):
    mixed = MixedTeam({"default": "llm"}, {"llm": Planner()})
    seeds = [0, 1, 2]
    llm = play([Team(make(world), make_agent=mixed) for _ in seeds], seeds, batched=True)
    scripted = play([Team(make(world)) for _ in seeds], seeds, batched=True)
    assert llm == scripted
    assert any("directive_followed" in kinds for episode in llm for _, kinds in episode)


def test_every_llm_agent_of_every_live_team_is_scored_in_one_call_per_tick():
    score = HashScore()
    mixed = MixedTeam({"default": "llm", "agent_C": "scripted"}, {"llm": LLMResolver(score)})
    seeds = [0, 1, 2]
    teams = [Team(make("escape-room", max_steps=8), make_agent=mixed) for _ in seeds]
    batched = play(teams, seeds, batched=True)
    lengths = [len(e) for e in batched]
    assert len(score.calls) == max(lengths)  # escape-room: one tick per decision
    # each call holds the LLM agents (A and B: two per team) of the teams still running
    assert score.calls == [2 * sum(n > t for n in lengths) for t in range(max(lengths))]
    alone = play([Team(make("escape-room", max_steps=8), make_agent=mixed) for _ in seeds], seeds, batched=False)
    assert alone == batched and len(score.calls) == max(lengths) + sum(lengths)


def test_an_agent_whose_model_prefers_waiting_ignores_its_directives():
    mixed = MixedTeam({"default": "llm"}, {"llm": LLMResolver(Prefer("wait"))})
    metrics = run_episodes("escape-room", {"max_steps": 6}, OraclePolicy(), [0, 1], make_agent=mixed)
    scripted = run_episodes("escape-room", {"max_steps": 6}, OraclePolicy(), [0, 1])
    for lazy, good in zip(metrics, scripted):
        assert lazy.comm_effectiveness == 0.0 and lazy.success == 0.0
        assert good.comm_effectiveness == 1.0
        assert lazy.invalid_rate == good.invalid_rate == 0.0


def test_an_invalid_directive_costs_an_llm_agent_its_tick_as_a_scripted_one():
    world = make("escape-room")
    team = Team(world, make_agent=MixedTeam({"default": "llm"}, {"llm": LLMResolver(HashScore())}))
    state = team.reset(0)
    bad = next(i for i, d in enumerate(state.candidates)
               if d.target and world.check(d.target, d) is not None)
    _, _, _, info = team.step(bad)
    kinds = [e.kind for e in info["events"]]
    assert kinds.count("directive_invalid") == 1 and "directive_followed" not in kinds


def test_the_role_agents_score_with_the_coordinators_base_model_exactly():
    coord = Coordinator(load_backbone("tiny-random", device="cpu"), normalization="token")
    with torch.no_grad():
        for group in coord.policy_param_groups():
            for p in group["params"]:
                p.add_(0.5)  # an adapter far from zero: its scores differ from the base model's
    coord.weights_changed()
    prompts = [ChoicePrompt("Escape room rules.", "You are agent_A.\nagent_A in hall.", ("wait", "use door")),
               ChoicePrompt("Escape room rules.", "You are agent_B.\nagent_B in vault.", ("wait", "move hall", "take map"))]
    got = ChoiceScorer(coord.tokenizer, coord.scorer, "sum", coord.disable_adapter)(prompts)
    scorer = ChoiceScorer.of_coordinator(coord)
    chat, tok = scorer.chat, scorer.tokens
    for prompt, row in zip(prompts, got):
        prefix = tok([chat.head + prompt.system + chat.user_head])[0]
        dec = EncodedDecision(tok([prompt.user + chat.assistant_head])[0],
                              [t + scorer.end_ids for t in tok(list(prompt.options))], [1] * len(prompt.options))
        with torch.no_grad():
            with coord.peft.disable_adapter():
                base = score_naive(coord.peft, prefix, [dec])[0]
            adapted = score_naive(coord.peft, prefix, [dec])[0]
        assert row == pytest.approx(base, abs=1e-4)
        assert max(abs(a - b) for a, b in zip(adapted, base)) > 1e-3
    token_mean = scorer(prompts)
    assert token_mean[1][2] == pytest.approx(got[1][2] / len(tok(["take map"])[0] + scorer.end_ids), abs=1e-5)


def test_team_agents_config_picks_kinds_by_name_then_role_then_default():
    config = load_config(None, ["env.name=software-team", "team.agents.default=llm", "team.agents.engineer=scripted",
                                "team.agents.engineer_2=llm", "team.llm.role_prompts.qa=You test the release."])
    coord = Coordinator(load_backbone("tiny-random", device="cpu"))
    factory = agent_factory(config, coord)
    world = make("software-team")
    team = Team(world, make_agent=factory)
    kinds = {name: type(agent) for name, agent in team.agents.items()}
    assert kinds == {"product_manager": LLMAgent, "architect": LLMAgent, "engineer_1": ScriptedAgent,
                     "engineer_2": LLMAgent, "qa": LLMAgent}
    assert team.agents["qa"].role_prompt == "You test the release."
    assert "product manager" in team.agents["product_manager"].role_prompt
    assert agent_factory(load_config(None, []), coord) is None  # all scripted: the plain fast path
    assert role_word("agent_B") == "agent" and role_word("engineer_12") == "engineer"


@pytest.mark.parametrize("key, message", [
    ("team.agents.wizard=llm", "team.agents.wizard: escape-room has no agent or role 'wizard'; agents: agent_A"),
    ("team.llm.role_prompts.cook=Cook.", "team.llm.role_prompts.cook: escape-room has no agent"),
])
def test_unknown_agent_names_are_refused_naming_the_key_and_the_agents(key, message):
    config = load_config(None, [key])
    with pytest.raises(TeamTRError, match=message):
        check_team(config, make("escape-room"))


def test_an_unknown_agent_kind_is_refused_naming_the_kinds():
    with pytest.raises(TeamTRError, match="team.agents.qa.*'scripted', 'llm' or 'remote'"):
        load_config(None, ["team.agents.qa=robot"])
    with pytest.raises(TeamTRError, match="team.agents.qa: unknown agent kind 'robot'"):
        MixedTeam({"qa": "robot"}, {})


def test_llm_agents_on_another_backbone_need_no_coordinator():
    config = load_config(None, ["team.agents.agent_B=llm", "team.llm.backbone=tiny-random-4", "model.device=cpu"])
    factory = agent_factory(config, None)
    score = factory.resolvers["llm"].score
    assert score.scorer.num_layers == 4  # tiny-random has 2
    metrics = run_episodes("escape-room", {"max_steps": 3}, OraclePolicy(), [0], make_agent=factory)
    assert metrics[0].length == 3 and factory.resolvers["llm"].calls == 3
    with pytest.raises(TeamTRError, match="team.llm.backbone 'same' needs a coordinator"):
        agent_factory(load_config(None, ["team.agents.agent_B=llm"]), None)
