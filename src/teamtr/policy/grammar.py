"""The directive grammar of a whole-team decision, as plain data (no torch, no environment).

A whole-team directive is one line per agent, in the agents' order, each line exactly one of that
agent's options (its valid directives' texts, then the "carry on" line that keeps the directive in force
for it), the lines joined by newlines:

    agent_A: fetch the key
    agent_B: carry on
    agent_C: fetch the map

This module holds the grammar, turns a choice into text and text back into a choice, builds a grammar
from a state's candidates, and, as token ids (``TokenGrammar``), compiles it into the chained per-agent
token tries (``Automaton``) under whose mask ``policy.decoding`` decodes.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teamtr.core import TeamTRError

State = tuple[int, int]  # (agent, trie node); (number of agents, 0) once the output is complete

#: The carry-on line of an agent: keep the directive in force for it. Always its last option.
CARRY_ON = "{agent}: carry on"


@dataclass(frozen=True)
class DirectiveGrammar:
    """Per agent (in order), the texts its line may take.

    Attributes:
        agents: the role agents' names, in the order their lines are written.
        options: ``options[i]`` the line texts allowed for ``agents[i]`` (non-empty, distinct, no newline).
    """

    agents: tuple[str, ...]
    options: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if not self.agents:
            raise TeamTRError("A directive grammar needs at least one agent.")
        if len(self.options) != len(self.agents):
            raise TeamTRError(
                f"A directive grammar has {len(self.agents)} agents but {len(self.options)} option lists; "
                "give one list of line texts per agent."
            )
        for agent, opts in zip(self.agents, self.options):
            if not opts:
                raise TeamTRError(f"Agent {agent!r} has no line options; give at least its carry-on line.")
            for text in opts:
                if not text.strip() or "\n" in text:
                    raise TeamTRError(
                        f"Agent {agent!r} has the line option {text!r}; a line must be non-empty text "
                        "without a newline (newlines separate the agents' lines)."
                    )
            if len(set(opts)) != len(opts):
                raise TeamTRError(f"Agent {agent!r} lists a line option twice: {list(opts)}.")

    @property
    def size(self) -> int:
        """The number of whole-team outputs (the joint space that decoding never enumerates)."""
        return math.prod(len(o) for o in self.options)

    def lines(self, choice: Sequence[int]) -> list[str]:
        """The line of each agent for ``choice`` (one option index per agent)."""
        if len(choice) != len(self.agents):
            raise TeamTRError(f"A choice names {len(choice)} options for {len(self.agents)} agents.")
        return [self.options[i][j] for i, j in enumerate(choice)]

    def text(self, choice: Sequence[int], separator: str = "\n") -> str:
        return separator.join(self.lines(choice))

    def parse(self, text: str, separator: str = "\n") -> tuple[int, ...] | None:
        """The choice whose ``text`` this is, or ``None`` when the text is not a whole-team output."""
        lines = text.split(separator)
        if len(lines) != len(self.agents):
            return None
        choice = []
        for opts, line in zip(self.options, lines):
            if line not in opts:
                return None
            choice.append(opts.index(line))
        return tuple(choice)


def grammar_from_candidates(
    agents: Sequence[str], candidates: Sequence[tuple[str | None, str]], carry_on: str = CARRY_ON
) -> tuple[DirectiveGrammar, tuple[tuple[int, ...], ...]]:
    """The whole-team grammar of a state's candidate directives, given as ``(target, text)`` pairs.

    An agent's options are the texts of the candidates whose target is exactly that agent, in the
    candidates' order, then its carry-on line (``carry_on`` formatted with ``agent``). Candidates
    addressed to no single agent (a team goal, target ``None``; an allocation, ``"a+b"``; the no-op)
    have no line of their own and are left out.

    Returns the grammar and, per agent and option, the index in ``candidates`` of that option's
    directive (``-1`` for the carry-on line).
    """
    index = {agent: i for i, agent in enumerate(agents)}
    texts: list[list[str]] = [[] for _ in agents]
    sources: list[list[int]] = [[] for _ in agents]
    for k, (target, text) in enumerate(candidates):
        if target in index and text not in texts[index[target]]:
            texts[index[target]].append(text)
            sources[index[target]].append(k)
    for i, agent in enumerate(agents):
        texts[i].append(carry_on.format(agent=agent))
        sources[i].append(-1)
    grammar = DirectiveGrammar(tuple(agents), tuple(tuple(t) for t in texts))
    return grammar, tuple(tuple(s) for s in sources)


@dataclass(frozen=True)
class TokenGrammar:
    """A directive grammar as token ids: ``lines[i][j]`` the ids of agent i's option j (tokenised
    alone), ``separator`` the ids between two lines, ``end`` the ids after the last line."""

    lines: tuple[tuple[tuple[int, ...], ...], ...]
    separator: tuple[int, ...]
    end: tuple[int, ...]

    def output(self, choice: Sequence[int]) -> tuple[int, ...]:
        """The token ids of the whole-team output ``choice`` (one option index per agent)."""
        out: list[int] = []
        for i, j in enumerate(choice):
            out += self.lines[i][j]
            out += self.end if i == len(self.lines) - 1 else self.separator
        return tuple(out)


def tokenize_grammar(grammar: DirectiveGrammar, tokens: Callable[[Sequence[str]], list[tuple[int, ...]]],
                     end: Sequence[int], separator: str = "\n") -> TokenGrammar:
    """Token ids of every line (``tokens``: a ``prompts.TokenCache``, each text tokenised alone);
    ``end``: the coordinator's end-marker ids (``Coordinator.end_ids``)."""
    flat = [t for opts in grammar.options for t in opts]
    ids = iter(tokens(flat + [separator]))
    lines = tuple(tuple(next(ids) for _ in opts) for opts in grammar.options)
    return TokenGrammar(lines, next(ids), tuple(end))


class Automaton:
    """The chained per-agent tries of a ``TokenGrammar``: valid next tokens and completed lines."""

    def __init__(self, grammar: TokenGrammar) -> None:
        if not grammar.lines or not grammar.separator or not grammar.end:
            raise TeamTRError("A token grammar needs at least one agent, separator ids and end ids.")
        self.children: list[list[dict[int, int]]] = []
        self.option: list[list[int]] = []  # per agent and node: the option completed there, else -1
        last = len(grammar.lines) - 1
        for i, opts in enumerate(grammar.lines):
            terminator = grammar.end if i == last else grammar.separator
            children: list[dict[int, int]] = [{}]
            option = [-1]
            for j, line in enumerate(opts):
                node = 0
                for tok in line + terminator:
                    if option[node] >= 0:
                        raise TeamTRError(f"Agent {i}: option {option[node]}'s tokens start option {j}'s; "
                                          "the output would not parse uniquely.")
                    if tok not in children[node]:
                        children[node][tok] = len(children)
                        children.append({})
                        option.append(-1)
                    node = children[node][tok]
                if children[node] or option[node] >= 0:
                    raise TeamTRError(f"Agent {i}: option {j} has the same tokens as another or starts one.")
                option[node] = j
            self.children.append(children)
            self.option.append(option)
        self.n_agents = len(grammar.lines)

    def valid(self, state: State) -> list[int]:
        return list(self.children[state[0]][state[1]])

    def done(self, state: State) -> bool:
        return state[0] == self.n_agents

    def advance(self, state: State, token: int) -> tuple[State, int]:
        """The state after ``token`` and the option it completed (-1 if none)."""
        a, n = state
        if self.done(state) or token not in self.children[a][n]:
            raise TeamTRError(f"Token {token} is not a valid continuation of the whole-team output here "
                              f"(agent {a}); the output does not follow its grammar.")
        child = self.children[a][n][token]
        opt = self.option[a][child]
        return ((a + 1, 0) if opt >= 0 else (a, child)), opt


@functools.lru_cache(maxsize=4096)
def automaton(grammar: TokenGrammar) -> Automaton:
    """The automaton of a grammar, built once: a world's grammars recur across its states."""
    return Automaton(grammar)


_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


def _norm(text: str) -> str:
    """Lower case, single spaces, no bullet in front and no punctuation at the ends."""
    return " ".join(_BULLET.sub("", text).lower().split()).strip(" .;,!")


def parse_free_text(grammar: DirectiveGrammar, text: str) -> tuple[int, ...] | None:
    """Map free text onto the grammar (free-text mode): the choice it says, or ``None`` when it says
    nothing the grammar allows (an invalid directive, penalised by the caller).

    Each non-empty line must be one agent's option up to case, spacing, a leading bullet ("- ",
    "1.") and end punctuation; an agent addressed by no line carries on; a line that matches no
    option, or a second line for the same agent, makes the whole text invalid.
    """
    lookup = {_norm(opt): (i, j) for i, opts in enumerate(grammar.options) for j, opt in enumerate(opts)}
    choice = [len(opts) - 1 for opts in grammar.options]  # carry on: the last option
    said: set[int] = set()
    for line in filter(str.strip, text.splitlines()):
        hit = lookup.get(_norm(line))
        if hit is None or hit[0] in said:
            return None
        said.add(hit[0])
        choice[hit[0]] = hit[1]
    return tuple(choice) if said else None
