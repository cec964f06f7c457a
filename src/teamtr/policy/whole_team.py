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

from teamtr.core import TeamTRError
from teamtr.policy.decoding import GrammarDecision, TokenScores, decode, score_outputs
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
    the ``GrammarDecision`` they were decoded under; per-token scores; values [B]."""

    lines: list[list[int]]
    tokens: list[tuple[int, ...]]
    decisions: list[tuple[tuple[int, ...], GrammarDecision]]  # (static prefix, dynamic + grammar)
    scores: list[TokenScores]  # one per prefix group, see ``groups``
    groups: list[list[int]]  # the rows of each prefix group
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


def _by_prefix(decisions: Sequence[tuple[tuple[int, ...], GrammarDecision]]) -> dict[tuple[int, ...], list[int]]:
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (prefix, _) in enumerate(decisions):
        groups.setdefault(prefix, []).append(i)
    return groups


@torch.no_grad()
def act_whole_team(coordinator: Coordinator, decisions: Sequence[DecisionLike], *, greedy: bool = False,
                   generator: torch.Generator | None = None) -> WholeTeamOutput:
    """Decode one whole-team directive per decision, batched per shared prefix with a KV cache."""
    gd, sources = grammar_decisions(coordinator, decisions)
    B = len(gd)
    lines: list[list[int]] = [[] for _ in range(B)]
    tokens: list[tuple[int, ...]] = [() for _ in range(B)]
    values = torch.zeros(B)
    scores, groups = [], []
    for prefix, rows in _by_prefix(gd).items():
        out = decode(coordinator.backbone.model, prefix, [gd[i][1] for i in rows], greedy=greedy,
                     temperature=coordinator.temperature, generator=generator)
        for j, i in enumerate(rows):
            lines[i] = [sources[i][a][o] for a, o in enumerate(out.choices[j]) if sources[i][a][o] >= 0]
            tokens[i] = out.tokens[j]
        values[rows] = coordinator.value_head(out.scores.value_hidden.float()).squeeze(-1).cpu()
        scores.append(out.scores)
        groups.append(rows)
    return WholeTeamOutput(lines, tokens, gd, scores, groups, values)


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
    """Per-token scores (with gradients) of given outputs, all under one prefix, and values [B]."""
    prefixes = {p for p, _ in decisions}
    if len(prefixes) != 1:
        raise TeamTRError(f"score_whole_team scores decisions of one static prefix at a time, got {len(prefixes)}.")
    s = score_outputs(coordinator.backbone.model, prefixes.pop(), [d for _, d in decisions], tokens,
                      temperature=coordinator.temperature)
    hidden = s.value_hidden.float()
    values = coordinator.value_head(hidden if coordinator.value_grad_to_trunk else hidden.detach()).squeeze(-1)
    return s, values
