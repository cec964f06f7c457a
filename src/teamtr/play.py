"""``teamtr play``: be the coordinator yourself in the terminal, or watch a trained one play.

Directive numbers are stable within an episode: the no-op is always 0, and every other directive
keeps the number it got the first time it was offered (1, 2, ... in order of first appearance), so a
number typed after reading the list picks the directive shown with it, however the candidate list
changed meanwhile. Typing a directive's text, or the start of it shared by no other candidate, works
too. With a coordinator (``--checkpoint``) each tick shows its top suggestions with their
probabilities; ``--auto`` lets it play greedily on its own, printing each tick.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from teamtr.core import Directive
from teamtr.team import Team, TeamState

#: A coordinator's view of one state: the probability of each candidate, in ``state.candidates`` order.
Advisor = Callable[[TeamState], Sequence[float]]


class StableNumbers:
    """Directive text -> number, fixed for the episode (the no-op 0, the rest 1, 2, ... as first seen)."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def number(self, directive: Directive) -> int:
        if directive.kind == "noop":
            return 0
        return self.numbers.setdefault(directive.text, len(self.numbers) + 1)

    def listing(self, state: TeamState) -> list[tuple[int, int]]:
        """``(number, candidate index)`` of every candidate now, by number."""
        return sorted((self.number(d), i) for i, d in enumerate(state.candidates))


def pick(answer: str, state: TeamState, numbers: StableNumbers) -> int | str:
    """The candidate index ``answer`` names (a stable number, a text or a unique start of one), else
    a message saying why it names none."""
    listing = numbers.listing(state)
    if answer.isdigit():
        for number, index in listing:
            if number == int(answer):
                return index
        return f"no directive {answer} now: pick a number shown, or type the directive's text"
    wanted = answer.casefold()
    texts = [d.text.casefold() for d in state.candidates]
    if wanted in texts:
        return texts.index(wanted)
    starts = [i for i, text in enumerate(texts) if text.startswith(wanted)]
    if len(starts) == 1:
        return starts[0]
    if starts:
        return f"{answer!r} starts {len(starts)} directives: type more of it, or its number"
    return f"{answer!r} is no directive now: type a number shown, a directive's text, or q"


def top(probs: Sequence[float], k: int = 3) -> list[int]:
    """Indices of the ``k`` most probable candidates, most probable first (ties: lower index)."""
    return sorted(range(len(probs)), key=lambda i: (-probs[i], i))[:k]


def show(state: TeamState, numbers: StableNumbers, probs: Sequence[float] | None) -> None:
    """The state, the recent history, the numbered candidates and the coordinator's top 3."""
    print(f"\n[tick {state.tick}]\n{state.state}")
    if state.history:
        print("recent: " + " | ".join(state.history))
    for number, index in numbers.listing(state):
        print(f"  {number:>2}. {state.candidates[index].text}")
    if probs is not None:
        shown = ", ".join(f"{numbers.number(state.candidates[i])}. {state.candidates[i].text} ({probs[i]:.2f})"
                          for i in top(probs))
        print(f"coordinator suggests: {shown}")


def play(team: Team, seed: int, advisor: Advisor | None = None, auto: bool = False) -> int:
    """One episode on ``team`` from ``seed``: the person types each directive (or q), or with
    ``auto`` the ``advisor``'s most probable one is played. Returns the exit status (0)."""
    if auto and advisor is None:
        raise ValueError("auto play needs an advisor (a trained coordinator)")
    state, numbers, total = team.reset(seed), StableNumbers(), 0.0
    print(state.task)
    while True:
        probs = advisor(state) if advisor is not None else None
        show(state, numbers, probs)
        if auto and probs is not None:
            choice: int | str = top(probs, 1)[0]
        else:
            answer = input("your directive (number or text, q to quit)> ").strip()
            if answer.lower() in ("q", "quit"):
                return 0
            choice = pick(answer, state, numbers)
            if isinstance(choice, str):
                print(choice)
                continue
        directive = state.candidates[choice]
        who = "coordinator plays" if auto else "you chose"
        print(f"{who} {numbers.number(directive)}. {directive.text}")
        state, reward, done, info = team.step(choice)
        total += reward
        shown = ", ".join(f"{e.kind}({e.agent or ''})" for e in info["events"]) or "none"
        print(f"reward {reward:+.2f} (total {total:+.2f}); events: {shown}")
        if done:
            print(f"\nepisode over: {info['outcome']} after {state.tick} ticks, return {total:+.2f}")
            return 0
