"""Team and TeamBatch: state parts, delivery, errors, batching, and the baseline table."""

import numpy as np
import pytest

from teamtr.agents import ScriptedAgent
from teamtr.core import NOOP, Directive, TeamTRError
from teamtr.envs import make
from teamtr.eval import baseline, run_episodes, summarize
from teamtr.team import Team, TeamBatch, recipients


def test_state_carries_task_state_candidates_with_noop_last_and_the_expert():
    team = Team(make("escape-room"))
    state = team.reset(1)
    assert state.world == "escape-room" and state.tick == 0 and state.history == ()
    assert state.candidates[-1] == NOOP and state.task == team.world.task
    assert state.candidates[state.expert] == team.world.expert_directive()


def test_history_keeps_the_last_three_lines():
    team = Team(make("escape-room"))
    state = team.reset(1)
    for _ in range(2):
        state, *_ = team.step(state.expert)
    assert state.history == ("agent_C: fetch the map", "agent_A: fetch the key")
    for _ in range(6):
        state, *_ = team.step(state.expert)
    assert state.history == ("map at door", "key at door", "lamp at door")


def test_choice_outside_the_candidates_says_the_allowed_range():
    team = Team(make("escape-room"))
    team.reset(0)
    with pytest.raises(TeamTRError, match=r"choice 13 is outside the candidates: pick an index in 0\.\.12"):
        team.step(13)
    with pytest.raises(TeamTRError, match="choice True"):
        team.step(True)
    team.step(np.int64(12))  # numpy integers are accepted


def test_step_after_the_episode_ended_is_an_error():
    team = Team(make("escape-room", max_steps=1))
    state = team.reset(0)
    _, _, done, info = team.step(len(state.candidates) - 1)
    assert done and info["outcome"] == "failure" and info["terminated"] and not info["truncated"]
    with pytest.raises(TeamTRError, match="after the episode ended; call reset"):
        team.step(0)


def test_reward_is_the_sum_of_its_terms_and_counts_the_events():
    team = Team(make("escape-room"))
    state = team.reset(1)
    _, reward, _, info = team.step(state.candidates.index(
        Directive("agent_A: fetch the map", "agent_A", "fetch:map")))
    # invalid (-0.5) + agent_A wasted its tick, agent_B and agent_C waited with work to do: 3 idle
    assert info["terms"]["invalid"] == -0.5 and info["terms"]["idle"] == pytest.approx(-0.15)
    assert reward == pytest.approx(sum(info["terms"].values())) == pytest.approx(-0.65)


def test_allocation_reaches_both_engineers_and_goals_reach_everyone():
    pair = Directive("pair engineer_1 with engineer_2 on the UI module", "engineer_1+engineer_2",
                     "pair:ui", "allocate")
    agents = ["product_manager", "engineer_1", "engineer_2"]
    assert recipients(pair, agents) == ["engineer_1", "engineer_2"]
    assert recipients(Directive("focus: x", None, "goal:x", "goal"), agents) == agents
    assert recipients(NOOP, agents) == []
    with pytest.raises(TeamTRError, match="unknown agent"):
        recipients(Directive("pair a with b", "a+b", "pair:ui", "allocate"), agents)


def test_zero_compliance_agents_ignore_every_valid_directive():
    world = make("escape-room", compliance=0.0)
    team = Team(world)
    state = team.reset(1)
    _, _, _, info = team.step(state.expert)
    assert [e.kind for e in info["events"]][0] == "directive_ignored"
    team2 = Team(make("escape-room"), agents={n: ScriptedAgent(n, 0.0) for n in world.agents})
    state = team2.reset(1)
    assert team2.step(state.expert)[3]["events"][0].kind == "directive_ignored"


def test_batch_steps_live_teams_like_single_teams():
    seeds = [3, 4, 5]
    batch = TeamBatch([Team(make("escape-room")) for _ in seeds])
    states = batch.reset(seeds)
    singles = [Team(make("escape-room")) for _ in seeds]
    expected = [team.reset(seed) for team, seed in zip(singles, seeds)]
    assert states == expected
    rewards = [0.0, 0.0, 0.0]
    while live := batch.live():
        results = batch.step([s.expert for s in batch.states()])
        for i, (_, reward, _, _) in zip(live, results):
            rewards[i] += reward
    one = []
    for team, state in zip(singles, expected):
        total, done = 0.0, False
        while not done:
            state, reward, done, _ = team.step(state.expert)
            total += reward
        one.append(total)
    assert rewards == pytest.approx(one)
    with pytest.raises(TeamTRError, match="0 live teams"):
        batch.step([0])


@pytest.mark.parametrize(
    ("world", "options"),
    [
        ("escape-room", {}),
        ("escape-room", {"agents": 4}),
        ("escape-room", {"names": "heldout"}),
        ("software-team", {}),
        ("software-team", {"engineers": 4}),
        ("software-team", {"names": "heldout"}),
    ],
)
def test_cooperation_matters_oracle_wins_random_and_noop_lose(world, options):
    seeds = range(200)
    rate = {p: summarize(run_episodes(world, options, baseline(p), seeds))["success"]
            for p in ("oracle", "random", "noop")}
    assert rate["oracle"] >= 0.99 and rate["random"] <= 0.25 and rate["noop"] == 0.0
