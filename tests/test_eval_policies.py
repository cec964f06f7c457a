"""Evaluation policies: one module, one factory for the CLI and the trainer."""

import math

import pytest
import torch

from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.eval.policies import (POLICIES, CoordinatorPolicy, MergedPolicy, OraclePolicy, RandomPolicy,
                                  ZeroShotPolicy, build_policies, decision_key)
from teamtr.team import Team


def states(n: int = 4):
    return [Team(make("escape-room")).reset(seed) for seed in range(n)]


class FakeCoordinator:
    """Counts how it is used; picks candidate 1, or 0 with the adapter switched off."""

    def __init__(self) -> None:
        self.adapter_on, self.calls, self.merges = True, [], 0

    def act(self, decisions, greedy=False, generator=None, keep=False):
        self.calls.append(len(decisions))

        class Out:
            choices = [1 if self.adapter_on else 0 for _ in decisions]
            logp = torch.full((len(decisions), 8), -math.log(8))  # uniform over up to 8 candidates
        return Out()

    def disable_adapter(self):
        coordinator = self

        class Off:
            def __enter__(self):
                coordinator.adapter_on = False

            def __exit__(self, *exc):
                coordinator.adapter_on = True
        return Off()

    def merged(self):
        self.merges += 1
        return self.disable_adapter()


def test_baselines_and_factory():
    built = build_policies(["oracle", "random", "first", "noop"], seed=3)
    s = states()
    assert built["oracle"].choose(s) == [x.expert for x in s]
    assert built["first"].choose(s) == [0] * 4
    assert built["noop"].choose(s) == [len(x.candidates) - 1 for x in s]
    assert built["random"].choose(s) == RandomPolicy(3).choose(s)  # seeded by the factory's seed
    assert isinstance(built["oracle"], OraclePolicy)
    assert set(POLICIES) == {"random", "first", "noop", "oracle", "heuristic", "trained", "zero-shot"}
    assert isinstance(built_expert := build_policies(["heuristic"])["heuristic"], OraclePolicy)
    assert built_expert.choose(s) == [x.expert for x in s]


def test_coordinator_policies_share_one_lazily_built_coordinator():
    made = []

    def build():
        made.append(FakeCoordinator())
        return made[-1]

    assert build_policies(["oracle"], coordinator=build) and not made  # no model for baselines
    built = build_policies(["trained", "zero-shot"], coordinator=build)
    assert len(made) == 1
    assert isinstance(built["trained"], MergedPolicy) and isinstance(built["zero-shot"], ZeroShotPolicy)
    s = states(20)
    assert built["zero-shot"].choose(s) == [0] * 20 and made[0].adapter_on  # adapter off only inside
    assert built["trained"].choose(s) == [1] * 20
    distinct = len({decision_key(x) for x in s})  # seeds with the same start share one prompt
    assert 16 < distinct < 20 and made[0].calls[-2:] == [16, distinct - 16]  # chunks of 16 distinct prompts
    calls = len(made[0].calls)
    assert built["trained"].choose(s[:5]) == [1] * 5 and len(made[0].calls) == calls  # all memoised
    with built["trained"].session():
        pass
    assert made[0].merges == 1


def test_factory_errors_name_the_problem():
    with pytest.raises(TeamTRError, match="Unknown policy 'orcale'"):
        build_policies(["orcale"])
    with pytest.raises(TeamTRError, match="--checkpoint"):
        build_policies(["trained"], coordinator=FakeCoordinator(), trained=False)
    with pytest.raises(TeamTRError, match="need a coordinator"):
        build_policies(["zero-shot"])
    assert CoordinatorPolicy(FakeCoordinator()).choose(states(2)) == [1, 1]
