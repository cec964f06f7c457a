"""Exploration noise: swaps keep the kind and change exactly one entity; p=0 changes nothing; the
rollout stores the executed directive and its probability under the acting policy."""

import torch

from teamtr.core import NOOP, Directive
from teamtr.envs import make
from teamtr.policy.coordinator import ActOutput
from teamtr.rl.losses import chosen
from teamtr.team import Team
from teamtr.train.collect import Collector, TrainSeeds
from teamtr.train.noise import neighbours, perturb

A_KEY = Directive("agent_A: fetch the key", "agent_A", "fetch:key")
A_MAP = Directive("agent_A: fetch the map", "agent_A", "fetch:map")
A_DOOR = Directive("agent_A: open the door", "agent_A", "use:door")
B_KEY = Directive("agent_B: fetch the key", "agent_B", "fetch:key")
B_MAP = Directive("agent_B: fetch the map", "agent_B", "fetch:map")
GOAL = Directive("team: ship it", None, "goal:ship", "goal")
CANDS = (A_KEY, A_MAP, A_DOOR, B_KEY, B_MAP, GOAL, NOOP)


def test_neighbours_change_exactly_one_entity():
    assert neighbours(CANDS, 0) == [1, 3]  # same agent another item; same task another agent
    assert neighbours(CANDS, 2) == []  # the only "use" of agent_A, and no one else opens the door
    assert neighbours(CANDS, 4) == [1, 3]
    assert neighbours(CANDS, 5) == [] and neighbours(CANDS, 6) == []  # lone goal; the no-op


def test_zero_noise_draws_nothing_and_full_noise_always_swaps():
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    assert perturb(CANDS, 0, 0.0, g) == 0
    assert torch.equal(g.get_state(), before)  # a run without noise samples exactly as before
    picks = [perturb(CANDS, 0, 1.0, g) for _ in range(400)]
    assert set(picks) == {1, 3} and 150 < picks.count(1) < 250  # uniform over the two neighbours
    assert perturb(CANDS, 2, 1.0, g) == 2  # nothing to swap in
    half = [perturb(CANDS, 0, 0.5, g) != 0 for _ in range(2000)]
    assert 900 < sum(half) < 1100


def test_swaps_over_random_world_states_are_valid_and_different():
    g = torch.Generator().manual_seed(1)
    swapped = 0
    for seed in range(60):
        team = Team(make("escape-room", agents=3, items=3))
        state = team.reset(seed)
        for k, d in enumerate(state.candidates):
            j = perturb(state.candidates, k, 1.0, g)
            if neighbours(state.candidates, k):
                other = state.candidates[j]
                assert j != k and other.kind == d.kind
                assert (other.target == d.target) != (other.task == d.task)
                swapped += 1
            else:
                assert j == k
    assert swapped > 300


class _FirstChoice:
    """Picks candidate 0 under a fixed, non-uniform distribution (log-probs -1, -2, -3, ...)."""

    def act(self, decisions, greedy=False, generator=None, keep=False):
        cmax = max(len(d.candidates) for d in decisions)
        scores = -torch.arange(1, cmax + 1, dtype=torch.float32).expand(len(decisions), cmax).clone()
        mask = torch.zeros(len(decisions), cmax, dtype=torch.bool)
        for b, d in enumerate(decisions):
            mask[b, : len(d.candidates)] = True
        logp = torch.log_softmax(scores.masked_fill(~mask, float("-inf")), -1)
        return ActOutput([0] * len(decisions), logp, mask, torch.zeros(len(decisions)), [-1] * len(decisions))


def _collect(noise: float):
    make_team = lambda: Team(make("escape-room", agents=3, items=3, max_steps=5))
    collector = Collector(_FirstChoice(), make_team, TrainSeeds(0, 1000), torch.Generator().manual_seed(0),
                          lambda states, logp: logp, noise=noise)
    return collector.collect(4, 4)


def test_collector_stores_the_executed_directive_and_counts_swaps():
    rollout, metrics, transcripts = _collect(0.0)
    assert (rollout.actions == 0).all() and "noise_swaps" not in metrics[0]
    rollout, metrics, transcripts = _collect(1.0)
    swapped = rollout.actions != 0
    assert swapped.all()  # candidate 0 (agent_A fetches the first item) always has a neighbour
    assert sum(m["noise_swaps"] for m in metrics) == len(rollout)
    # PPO's old log-prob is the executed candidate's, read from the acting distribution
    executed = chosen(rollout.logp, rollout.actions)
    assert torch.allclose(executed, rollout.logp.gather(1, rollout.actions[:, None]).squeeze(1))
    assert (executed < rollout.logp[:, 0]).all()  # not the sampled candidate 0's log-prob
    first = rollout.actions[rollout.episode_id == 0].tolist()
    assert [s["choice"] for s in transcripts[0]["steps"]] == first  # the transcript shows what ran
