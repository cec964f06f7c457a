"""Training in whole-team mode (``team.directives: whole_team``): collect decoded whole-team directives,
then the token-level PPO update (``rl.losses.token_policy_terms``).

The per-decision fields (values, rewards, episode ends) go into an ordinary ``Rollout`` with one
dummy candidate per decision, so GAE over decisions, advantage normalisation and minibatching are the
candidate mode's own; each row's ``handles`` indexes a ``TokenDecision`` here that holds what the
token-level loss needs: the prompt, the grammar, the output's tokens and the acting and reference
policies' per-token distributions. ``train/free_text.py`` acts and scores free text the same way
(a ``TokenActor`` of its own); ``token_update`` serves both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ContextManager

import torch
from torch import nn

from teamtr.policy.coordinator import Coordinator
from teamtr.policy.decoding import GrammarDecision
from teamtr.policy.whole_team import act_whole_team, dense, score_whole_team
from teamtr.rl import PPO, Rollout
from teamtr.rl.algorithms import EpochLog, run_epochs, set_learning_rates, step_row
from teamtr.rl.losses import clipped_value_loss, token_policy_terms
from teamtr.rl.rollout import Minibatch
from teamtr.team import TeamState

_DUMMY_LOGP = torch.zeros(1)  # the one dummy candidate of each decision's Rollout row
_DUMMY_MASK = torch.ones(1, dtype=torch.bool)


@dataclass
class TokenDecision:
    """One whole-team decision as the update reads it (T output tokens, K most valid tokens)."""

    prefix: tuple[int, ...]
    decision: GrammarDecision
    tokens: tuple[int, ...]
    logp: torch.Tensor  # [T] acting policy's log-prob of each token taken
    branch: torch.Tensor  # [T, K] acting policy's masked next-token log-probs
    ref_branch: torch.Tensor  # [T, K] the reference policy's
    valid: torch.Tensor  # [T, K] bool
    branching: torch.Tensor  # [T] bool


#: The KL reference's weights while scoring (``Trainer.reference_weights``: the base model, adapter
#: off, or the behaviour-cloned adapter); None: no KL term, no reference pass.
ReferenceWeights = Callable[[], ContextManager[None]] | None


@dataclass
class TokenInputs:
    """What ``rl.losses.token_policy_terms`` takes for one minibatch (B decisions, T tokens, K
    distribution entries per token), and the value head's values [B]."""

    new_logp: torch.Tensor
    old_logp: torch.Tensor
    new_branch: torch.Tensor
    old_branch: torch.Tensor
    ref_branch: torch.Tensor
    valid: torch.Tensor
    branching: torch.Tensor
    values: torch.Tensor


class TokenActor:
    """Acts for a ``Collector`` in a token-level mode and keeps its decisions (``store``, indexed
    by the rollout's handles) for ``token_update``; whole-team and free-text actors differ only in how
    they act and how they score a minibatch."""

    def __init__(self, coordinator: Coordinator, reference: ReferenceWeights) -> None:
        self.coordinator, self.reference = coordinator, reference
        self.store: list[Any] = []

    def act(self, states: Sequence[TeamState], generator: torch.Generator) -> tuple[list[Any], torch.Tensor, list[int]]:
        """Each state's choice (for ``Team.step``), values [B] and handles into ``store``."""
        raise NotImplementedError

    def begin_update(self) -> None:
        """Called once before an update's first step (the acting weights are still in place)."""

    def policy_inputs(self, items: Sequence[Any]) -> TokenInputs:
        """The token-level loss inputs of stored decisions, with gradients."""
        raise NotImplementedError

    def record(self, rollout: Rollout, handle: int, value: float, reward: float, info: dict[str, Any],
               episode: int, bootstrap: float, group: int) -> None:
        """Append the decision of ``handle`` to ``rollout`` (one dummy candidate, see the module docstring)."""
        rollout.append(logp=_DUMMY_LOGP, ref_logp=_DUMMY_LOGP, mask=_DUMMY_MASK, actions=0, values=value,
                       rewards=reward,
                       terminated=info["terminated"], truncated=info["truncated"], episode_id=episode,
                       handles=handle, bootstrap_values=bootstrap, group_id=group)


class WholeTeamActor(TokenActor):
    """Acts in whole-team mode: decodes under each state's grammar (``policy.whole_team``)."""

    def act(self, states: Sequence[TeamState], generator: torch.Generator
            ) -> tuple[list[Any], torch.Tensor, list[int]]:
        """Decode each state's directive; return its lines (for ``Team.step``), values [B], handles."""
        out = act_whole_team(self.coordinator, states, generator=generator)
        handles = [-1] * len(states)
        scores = out.scores
        branch, valid = dense(scores)
        ref = self._reference(out.decisions, out.tokens, branch)
        for i, tokens in enumerate(out.tokens):
            n = len(tokens)
            handles[i] = len(self.store)
            self.store.append(TokenDecision(out.decisions[i][0], out.decisions[i][1], tokens,
                                            scores.logp[i, :n].cpu(), branch[i, :n].cpu(), ref[i, :n].cpu(),
                                            valid[i, :n].cpu(), scores.branching[i, :n].cpu()))
        return list(out.lines), out.values, handles

    @torch.no_grad()
    def _reference(self, decisions: list, tokens: list, branch: torch.Tensor) -> torch.Tensor:
        """The reference policy's per-token distributions of the same outputs (the acting ones without a KL term)."""
        if self.reference is None:
            return branch
        with self.reference():
            scores, _ = score_whole_team(self.coordinator, decisions, tokens)
        return dense(scores)[0]

    def policy_inputs(self, items: Sequence[TokenDecision]) -> TokenInputs:
        s, values = score_whole_team(self.coordinator, [(d.prefix, d.decision) for d in items], [d.tokens for d in items])
        new_branch, _ = dense(s)
        T, K = new_branch.shape[1], new_branch.shape[2]
        dev = new_branch.device
        return TokenInputs(s.logp, pad_rows([d.logp for d in items], T, None, 0.0).to(dev), new_branch,
                           pad_rows([d.branch for d in items], T, K, -math.inf).to(dev),
                           pad_rows([d.ref_branch for d in items], T, K, -math.inf).to(dev),
                           pad_rows([d.valid for d in items], T, K, False).to(dev), s.branching, values)


def pad_rows(rows: Sequence[torch.Tensor], T: int, K: int | None, fill: float | bool) -> torch.Tensor:
    """Stack [t(, k)] tensors into [B, T(, K)], padding with ``fill``."""
    out = []
    for r in rows:
        pad = (0, T - r.shape[0]) if K is None else (0, K - r.shape[1], 0, T - r.shape[0])
        out.append(nn.functional.pad(r.float() if r.dtype != torch.bool else r, pad, value=fill))
    return torch.stack(out)


def _minibatch_terms(algo: PPO, actor: TokenActor, mb: Minibatch, ent_coef: float, kl_coef: float,
                     token_level: bool) -> tuple:
    """The token-level policy terms and the value loss of one minibatch."""
    c = algo.config
    x = actor.policy_inputs([actor.store[int(h)] for h in mb.handles])
    dev = x.new_logp.device
    t = token_policy_terms(x.new_logp, x.old_logp, x.new_branch, x.old_branch, x.ref_branch, x.valid, x.branching,
                           mb.advantages.to(dev), clip_eps=c.clip_eps, ent_coef=ent_coef, kl_coef=kl_coef,
                           token_level=token_level, report_clip_eps=c.clip_eps)
    v_loss = clipped_value_loss(x.values, mb.values.to(dev), mb.returns.to(dev), c.value_clip)
    return t, x.values, v_loss


def token_update(algo: PPO, actor: TokenActor, rollout: Rollout, token_level: bool = True) -> dict[str, float]:
    """PPO's epochs x minibatches with the token-level loss; the same schedules, optimiser, early stop
    and metrics as ``PPO.update``. A minibatch may mix static prefixes (scored in one folded pass); ``token_level``:
    per-token ratios, else one per decision (``algo.token_level``)."""
    c = algo.config
    algo._prepare(rollout)
    actor.begin_update()
    mult, ent_coef, kl_coef = algo.lr_multiplier, algo.ent_coef, algo.kl.value
    set_learning_rates(algo.optimizer, mult, algo.stage_lr_scale)
    limit = c.early_stop_factor * c.target_kl if c.early_stop_factor is not None else math.inf
    metrics = run_epochs(c.epochs, lambda: list(rollout.minibatches(c.minibatch_size, algo.generator)),
                         lambda batches: _epoch(algo, actor, batches, ent_coef, kl_coef, token_level, limit))
    metrics.update({"optim/lr": c.lr * mult * algo.stage_lr_scale, "optim/ent_coef": ent_coef,
                    "optim/kl_coef": kl_coef})
    if math.isfinite(metrics["policy/kl_ref_new"]):
        algo.kl.update(metrics["policy/kl_ref_new"], len(rollout))
    algo.updates_done += 1
    actor.store.clear()
    return metrics


def _epoch(algo: PPO, actor: TokenActor, batches: list[Minibatch], ent_coef: float, kl_coef: float,
           token_level: bool, kl_limit: float) -> EpochLog:
    """One pass over ``batches``, at most one step each; stops before a step out of the trust region."""
    c, log = algo.config, EpochLog()
    for mb in batches:
        t, values, v_loss = _minibatch_terms(algo, actor, mb, ent_coef, kl_coef, token_level)
        if float(t.kl_old_new) > kl_limit:
            log.stopped = True
            break
        norms = algo._step(-t.objective + c.vf_coef * v_loss)
        if norms is None:
            log.skipped += 1
            continue
        log.values.append(values.detach().cpu())
        log.returns.append(mb.returns)
        log.rows.append(step_row(t, v_loss, norms))
    return log
