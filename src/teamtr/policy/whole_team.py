"""The coordinator's whole-team decisions: one line per agent in one output, decoded under the
state's directive grammar (``policy.grammar``, ``policy.decoding``), with the value head at the
prompt's last token.

The grammar of a state comes from its candidates: each agent that some candidate addresses alone gets
a line, whose options are its candidates' texts then "carry on" (``grammar_from_candidates``);
candidates for no single agent (goals, allocations, the no-op) are not offered in this mode. A
decision's *lines* are the candidate indices of the options chosen, carry-on lines left out: what
``Team.step`` takes for a whole-team directive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from teamtr.policy.decoding import GrammarDecision, TokenScores, decode, fold_decisions, score_outputs
from teamtr.policy.grammar import (
    DirectiveGrammar,
    grammar_from_candidates,
    tokenize_grammar,
)
from teamtr.policy.prompts import DecisionLike

if TYPE_CHECKING:
    from teamtr.policy.coordinator import Coordinator


def team_grammar(decision: DecisionLike) -> tuple[DirectiveGrammar, tuple[tuple[int, ...], ...]]:
    """The grammar of a state and, per agent and option, its candidate index (-1: carry on). The
    agents are the single targets of the candidates, in their first appearance's order; a state with
    none has one line, "team: carry on" (the output is forced: nothing changes)."""
    agents: list[str] = []
    pairs = []
    for c in decision.candidates:
        target = getattr(c, "target", None)
        pairs.append((target, c.text))
        if target is not None and "+" not in target and target not in agents:
            agents.append(target)
    return grammar_from_candidates(agents or ["team"], pairs)


@dataclass
class WholeTeamOutput:
    """B whole-team decisions: per row the candidate indices of its new lines, its token ids and
    the ``GrammarDecision`` they were decoded under; per-token scores (row b of ``scores`` is decision
    b); values [B]."""

    lines: list[list[int]]
    tokens: list[tuple[int, ...]]
    decisions: list[tuple[tuple[int, ...], GrammarDecision]]  # (static prefix, dynamic + grammar)
    scores: TokenScores
    values: torch.Tensor


def grammar_decisions(coordinator: Coordinator, decisions: Sequence[DecisionLike]
                      ) -> tuple[list[tuple[tuple[int, ...], GrammarDecision]], list[tuple[tuple[int, ...], ...]]]:
    """Each decision's (static prefix, ``GrammarDecision``) and its options' candidate indices."""
    out, sources = [], []
    for d, (prefix, enc) in zip(decisions, coordinator.encode(decisions)):
        grammar, src = team_grammar(d)
        tokens = tokenize_grammar(grammar, coordinator.tokens, coordinator.end_ids)
        out.append((prefix, GrammarDecision(tuple(enc.dynamic), tokens)))
        sources.append(src)
    return out, sources


@torch.no_grad()
def act_whole_team(coordinator: Coordinator, decisions: Sequence[DecisionLike], *, greedy: bool = False,
                   generator: torch.Generator | None = None) -> WholeTeamOutput:
    """Decode one whole-team directive per decision, all in one KV-cached batch (rows under different
    static prefixes folded, ``decoding.fold_prefixes``)."""
    gd, sources = grammar_decisions(coordinator, decisions)
    prefix, folded = fold_decisions(gd)
    out = decode(coordinator.backbone.model, prefix, folded, greedy=greedy,
                 temperature=coordinator.temperature, generator=generator)
    lines = [[sources[i][a][o] for a, o in enumerate(out.choices[i]) if sources[i][a][o] >= 0]
             for i in range(len(gd))]
    values = coordinator.value_head(out.scores.value_hidden.float()).squeeze(-1).cpu()
    return WholeTeamOutput(lines, list(out.tokens), gd, out.scores, values)


def dense(scores: TokenScores) -> tuple[torch.Tensor, torch.Tensor]:
    """The branching tokens' distributions laid out per token: log-probs [B, T, K] (-inf where
    invalid) and the valid mask [B, T, K]; positions without a branch are all invalid."""
    B, T = scores.logp.shape
    K = scores.branch_logp.shape[1]
    logp = scores.logp.new_full((B, T, K), float("-inf"))
    valid = torch.zeros(B, T, K, dtype=torch.bool, device=scores.logp.device)
    if len(scores.branch_index):
        at = (scores.branch_index[:, 0], scores.branch_index[:, 1])
        logp = logp.index_put(at, scores.branch_logp)
        valid = valid.index_put(at, scores.branch_mask)
    return logp, valid


def score_whole_team(coordinator: Coordinator, decisions: Sequence[tuple[tuple[int, ...], GrammarDecision]],
                     tokens: Sequence[Sequence[int]]) -> tuple[TokenScores, torch.Tensor]:
    """Per-token scores (with gradients) of given outputs in one pass (rows under different static
    prefixes folded), and values [B]."""
    prefix, folded = fold_decisions(decisions)
    s = score_outputs(coordinator.backbone.model, prefix, folded, tokens, temperature=coordinator.temperature)
    hidden = s.value_hidden.float()
    values = coordinator.value_head(hidden if coordinator.value_grad_to_trunk else hidden.detach()).squeeze(-1)
    return s, values
