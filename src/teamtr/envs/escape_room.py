"""escape-room: agents bring required items out of access-restricted rooms to the door.

Map: a hall with the exit door and ``zones`` rooms off it, each ``DEPTH`` moves deep. Each required
item lies in its own room, and each room admits only one agent (shuffled every episode, written in
the state). The door opens when every item lies at the door (dropped in the hall) and an agent uses
it. Items are spread over the agents' rooms so that, with at least as many items as agents, every
agent must fetch something: cooperation is required, and only the coordinator knows who can go where.

Primitive actions: ``move <zone>`` (one step into a room), ``move hall`` (one step out), ``pick X``,
``drop X``, ``use door``, ``wait``. Directives: "agent_B: fetch the map" (``fetch:map``) and
"agent_A: open the door" (``use:door``). A directive an agent cannot carry out (a room it may not
enter, a door not ready) is invalid and wastes its tick.
"""

from __future__ import annotations

import random

from teamtr.core import NOOP, AgentView, Directive, Event, Outcome, TeamTRError, expert_in_turn
from teamtr.envs import vocabulary as vocab
from teamtr.envs.registry import check_choice, check_float, check_int

DEPTH = 2  # moves from the hall to the back of a room: fetching one item takes 2 * DEPTH + 2 ticks
VOCAB = {
    "default": {
        "agents": ["agent_A", "agent_B", "agent_C", "agent_D", "agent_E", "agent_F"],
        "items": ["map", "key", "lamp", "rope", "badge"],
        "zones": ["vault", "library", "cellar", "tower", "garden", "attic"],
    },
    # Disjoint words for the seed's generalisation test (train on A, B, C; test on unseen names).
    "heldout": {
        "agents": ["agent_P", "agent_Q", "agent_R", "agent_S", "agent_T", "agent_U"],
        "items": ["gem", "scroll", "coin", "mask", "bell"],
        "zones": ["crypt", "lab", "chapel", "armory", "mine", "loft"],
    },
}
_FORBIDDEN = vocab.forbidden_words(*([n for names in VOCAB[v].values() for n in names] for v in ("default", "heldout")))
FRESH = {  # names: fresh draws each episode's names from these (see envs/vocabulary.py)
    "agents": vocab.agent_pool(_FORBIDDEN),
    "items": vocab.one_or_two_words(vocab.ITEM_ADJECTIVES, vocab.ITEM_NOUNS, _FORBIDDEN),
    "zones": vocab.one_or_two_words(vocab.ZONE_ADJECTIVES, vocab.ZONE_NOUNS, _FORBIDDEN),
}
NAMES = (*VOCAB, "fresh")
Pos = tuple[str, int]  # (zone, depth 1..DEPTH) or ("hall", 0)
HALL: Pos = ("hall", 0)


class EscapeRoomWorld:
    """The escape-room world (see the module docstring).

    Options: ``agents`` (2-6), ``items`` (2-5, at most ``zones``), ``zones`` (2-6), ``names``
    (``default`` | ``heldout`` | ``fresh``: new names drawn from ``FRESH`` at every ``reset(seed)``,
    the same for the same seed), ``max_steps`` (ticks before failure; default
    ``6 * ceil(items / agents) + 8``: the oracle needs ``6 * ceil(items / agents) + 3`` or so,
    random directives succeed in a few percent of episodes),
    ``compliance`` (0-1, the probability a role agent takes up a valid directive), ``hints`` (each
    agent's line also says which items it may fetch: the "who may enter where" lookup is done for the
    coordinator; an easier variant for studying RL on the rest of the task), ``task_text`` (``full``:
    the task names the team and the items; ``generic``: it names none of them, the state lists them,
    so every episode, name set and team size with the same ``max_steps`` shares one static prefix:
    with ``names: fresh`` no pass re-encodes a prefix per episode; the names' own tokens remain).
    """

    name = "escape-room"
    team_size_option = ("agents", 3)
    vocabulary_option = ("names", "heldout")

    def __init__(
        self,
        agents: int = 3,
        items: int = 3,
        zones: int = 4,
        names: str = "default",
        max_steps: int | None = None,
        compliance: float = 1.0,
        hints: bool = False,
        task_text: str = "full",
    ) -> None:
        check_int(self.name, "agents", agents, 2, 6)
        check_int(self.name, "zones", zones, 2, 6)
        check_int(self.name, "items", items, 2, min(5, zones), f"2..5 and at most zones={zones}")
        self.names = check_choice(self.name, "names", names, NAMES)
        self.compliance = check_float(self.name, "compliance", compliance, 0.0, 1.0)
        if not isinstance(hints, bool):
            raise TeamTRError(f"escape-room option hints = {hints!r}: use true or false.")
        self.hints = hints
        self.task_text = check_choice(self.name, "task_text", task_text, ("full", "generic"))
        per_agent = -(-items // agents)
        self.max_steps = 6 * per_agent + 8 if max_steps is None else max_steps
        check_int(self.name, "max_steps", self.max_steps, 1, 10_000)
        self._sizes = {"agents": agents, "items": items, "zones": zones}
        self._name_episode(0)
        self._access: dict[str, str] = {}
        self._where: dict[str, Pos | str] = {}  # item -> position, or the agent holding it
        self._pos: dict[str, Pos] = {}
        self._holding: dict[str, str | None] = {}
        self._intent: dict[str, Directive | None] = {}
        self._tick = 0
        self._outcome: Outcome | None = None

    # -- episode ---------------------------------------------------------------------------------
    def _name_episode(self, seed: int) -> None:
        """Set the agent, item and zone names and the task text (fixed ones, or this seed's fresh draw)."""
        if self.names == "fresh":
            rng, taken = vocab.episode_rng(self.name, seed), []
            chosen = {kind: vocab.draw(rng, FRESH[kind], k, taken) for kind, k in self._sizes.items()}
        else:
            chosen = {kind: VOCAB[self.names][kind][:k] for kind, k in self._sizes.items()}
        self.agents, self.items, self.zones = chosen["agents"], chosen["items"], chosen["zones"]
        if self.task_text == "generic":  # the state names the agents and items; this text is the same for all
            team, listed = "", "every item"
        else:
            team, listed = f" Team: {', '.join(self.agents)}.", ", ".join(f"the {item}" for item in self.items)
        self.task = (
            f"Escape room.{team} Bring {listed} to the door in the hall, "
            "then one agent opens the door. Each room admits one agent only. An agent keeps its "
            f"directive until given a new one. Fail after {self.max_steps} ticks."
        )

    def reset(self, seed: int) -> None:
        if self.names == "fresh":
            self._name_episode(seed)
        rng = random.Random(seed)
        rooms = rng.sample(self.zones, len(self.items))
        order = self.agents[:]
        rng.shuffle(order)
        self._access = {zone: rng.choice(self.agents) for zone in self.zones}
        for i, zone in enumerate(rooms):  # round-robin: every agent owns a needed room if it can
            self._access[zone] = order[i % len(order)]
        self._where = {item: (zone, DEPTH) for item, zone in zip(self.items, rooms)}
        self._pos = {agent: HALL for agent in self.agents}
        self._holding = dict.fromkeys(self.agents)
        self._intent = dict.fromkeys(self.agents)
        self._tick = 0
        self._outcome = None

    def _at_door(self, item: str) -> bool:
        return self._where[item] == HALL

    def _place(self, item: str) -> str:
        where = self._where[item]
        if isinstance(where, str):
            return f"held by {where}"
        if where == HALL:
            return "at door"
        return f"in {where[0]} (only {self._access[where[0]]} may enter)"

    def describe(self) -> str:
        lines = [f"tick {self._tick} of {self.max_steps}."]
        lines += [f"{item}: {self._place(item)}." for item in self.items]
        for agent in self.agents:
            pos = self._pos[agent][0]
            doing = self._intent[agent]
            busy = doing is not None and not self.done(agent, doing)
            work = doing.task.replace(":", " ") if busy else "idle"
            hint = ""
            if self.hints:  # items still in a room this agent may enter
                reach = [f"the {item}" for item, where in self._where.items()
                         if isinstance(where, tuple) and where != HALL and self._access[where[0]] == agent]
                hint = f", may fetch {' or '.join(reach)}" if reach else ""
            lines.append(f"{agent}: in {pos}, {work}{hint}.")
        return " ".join(lines)

    def view(self, agent: str) -> AgentView:
        pos = self._pos[agent]
        here = [item for item, where in self._where.items() if where == pos]
        held = self._holding[agent]
        actions = ["wait", "move hall"] if pos != HALL else ["wait", "use door"]
        if pos == HALL:
            actions += [f"move {z}" for z in self.zones if self._access[z] == agent]
        elif pos[1] < DEPTH:
            actions.append(f"move {pos[0]}")
        actions += [f"pick {item}" for item in here if held is None and pos != HALL]
        actions += [f"drop {held}"] if held else []
        text = f"{agent} in {pos[0]}, holding {held or 'nothing'}; here: {', '.join(here) or 'nothing'}."
        return AgentView(agent, text, tuple(actions))

    # -- directives ------------------------------------------------------------------------------
    def directives(self) -> list[Directive]:
        out = []
        for agent in self.agents:
            out += [
                Directive(f"{agent}: fetch the {item}", agent, f"fetch:{item}")
                for item in self.items
                if not self._at_door(item)
            ]
            out.append(Directive(f"{agent}: open the door", agent, "use:door"))
        return out

    def check(self, agent: str, directive: Directive) -> str | None:
        kind, _, obj = directive.task.partition(":")
        if kind == "use":
            missing = [item for item in self.items if not self._at_door(item)]
            return f"the {missing[0]} is not at the door" if missing else None
        if kind != "fetch" or obj not in self._where:
            return f"escape-room has no task {directive.task!r}"
        where = self._where[obj]
        if where == HALL:
            return f"the {obj} is already at the door"
        if isinstance(where, tuple) and self._access[where[0]] != agent:
            return f"only {self._access[where[0]]} may enter the {where[0]}"
        return None

    def done(self, agent: str, directive: Directive) -> bool:
        kind, _, obj = directive.task.partition(":")
        if kind == "use":
            return self._outcome == "success"
        return obj in self._where and self._at_door(obj)

    def _toward(self, agent: str, goal: Pos) -> str:
        """One move from the agent's position toward ``goal`` (rooms hang off the hall)."""
        pos = self._pos[agent]
        if pos[0] == goal[0] and pos[0] != "hall":
            return f"move {pos[0]}" if pos[1] < goal[1] else "move hall"
        if pos != HALL:
            return "move hall"
        return f"move {goal[0]}" if goal != HALL else "wait"

    def plan(self, agent: str, directive: Directive | None) -> str:
        # The world remembers what each agent works on: describe() and the oracle report it.
        self._intent[agent] = directive if directive is not None and directive.kind != "noop" else None
        if directive is None or directive.kind == "noop":
            return "wait"
        kind, _, obj = directive.task.partition(":")
        held, pos = self._holding[agent], self._pos[agent]
        if kind == "use" or held == obj:
            if held is not None:
                return f"drop {held}" if pos == HALL else "move hall"
            return "use door" if pos == HALL else "move hall"
        if obj not in self._where or self._at_door(obj):
            return "wait"
        if held is not None:  # redirected while carrying something else: put it down here
            return f"drop {held}"
        where = self._where[obj]
        goal = self._pos[where] if isinstance(where, str) else where
        return f"pick {obj}" if pos == goal else self._toward(agent, goal)

    # -- goals (a hierarchical coordinator's strategic level) -----------------------------------
    def goals(self) -> list[Directive]:
        """One goal per item not yet at the door; once all are there, opening the door."""
        out = [Directive(f"goal: bring the {item} to the door", None, f"bring:{item}", "goal")
               for item in self.items if not self._at_door(item)]
        return out or [Directive("goal: open the door", None, "open:door", "goal")]

    def expert_goal(self) -> Directive:
        """The first item nobody carries yet (else the first not at the door; else the door)."""
        goals = self.goals()
        loose = [g for g in goals if g.task.startswith("bring:") and not isinstance(self._where[g.task[6:]], str)]
        return (loose or goals)[0]

    # -- dynamics --------------------------------------------------------------------------------
    def step(self, actions: dict[str, str]) -> list[Event]:
        if self._outcome is not None:
            return []
        events: list[Event] = []
        for agent in self.agents:
            events += self._act(agent, actions.get(agent, "wait"))
        self._tick += 1
        if self._outcome is None and self._tick >= self.max_steps:
            self._outcome = "failure"
            events.append(Event("failure", None, f"step limit {self.max_steps}"))
        return events

    def _act(self, agent: str, action: str) -> list[Event]:
        verb, _, obj = action.partition(" ")
        pos, held = self._pos[agent], self._holding[agent]
        if verb == "move" and obj == "hall" and pos != HALL:
            self._pos[agent] = HALL if pos[1] == 1 else (pos[0], pos[1] - 1)
        elif verb == "move" and obj in self._access and self._access[obj] == agent:
            if pos == HALL:
                self._pos[agent] = (obj, 1)
            elif pos[0] == obj and pos[1] < DEPTH:
                self._pos[agent] = (obj, pos[1] + 1)
            else:
                return self._idle(agent, action)
        elif verb == "pick" and obj in self._where and held is None:
            where = self._where[obj]
            if isinstance(where, str):
                return [Event("conflict", agent, f"{agent} and {where} both want the {obj}")]
            if where != pos or where == HALL:  # what lies at the door stays there
                return self._idle(agent, action)
            self._where[obj], self._holding[agent] = agent, obj
        elif verb == "drop" and held is not None and obj == held:
            self._where[obj], self._holding[agent] = pos, None
            if pos == HALL:
                return [Event("milestone", agent, f"{obj} at door")]
        elif verb == "use" and pos == HALL and all(map(self._at_door, self.items)):
            self._outcome = "success"
            return [Event("success", agent, "door open")]
        else:  # waiting, or an action that does nothing here
            return self._idle(agent, action)
        return []

    def _idle(self, agent: str, action: str) -> list[Event]:
        """An ``idle`` event if the agent wasted a tick it could have used: an item still lies in a
        room it may enter, or every item is at the door and the door is still shut."""
        useful = all(map(self._at_door, self.items)) or any(
            isinstance(where, tuple) and where != HALL and self._access[where[0]] == agent
            for where in self._where.values()
        )
        return [Event("idle", agent, action)] if useful else []

    def outcome(self) -> Outcome | None:
        return self._outcome

    def truncated(self) -> bool:
        """Never: the task text says "fail after max_steps ticks", so the step budget is the task's."""
        return False

    def decision_due(self) -> bool:
        return True

    # -- oracle ----------------------------------------------------------------------------------
    def expert_directive(self) -> Directive:
        """Deterministic in the state text: the first item nobody brings goes to the agent who can
        reach it, if that agent is not busy bringing another; once all items are at the door, the
        first agent in the hall (else the first agent) opens it; otherwise no new directive."""
        def busy(agent: str) -> bool:
            doing = self._intent[agent]
            return doing is not None and not self.done(agent, doing)

        for item in self.items:
            where = self._where[item]
            if where == HALL:
                continue
            who = where if isinstance(where, str) else self._access[where[0]]
            doing = self._intent[who]
            if doing is not None and doing.task == f"fetch:{item}":
                continue
            if not busy(who) or (isinstance(where, str) and who == where):
                return Directive(f"{who}: fetch the {item}", who, f"fetch:{item}")
        if all(map(self._at_door, self.items)):
            if any(d is not None and d.task == "use:door" for d in self._intent.values()):
                return NOOP
            in_hall = [a for a in self.agents if self._pos[a] == HALL] or self.agents
            return Directive(f"{in_hall[0]}: open the door", in_hall[0], "use:door")
        return NOOP

    def expert_directives(self) -> list[Directive]:
        """The whole-team oracle: ``expert_directive`` asked again with each answer in force, so
        every agent with something to fetch (or the door to open) gets its line in the same tick."""
        saved = dict(self._intent)
        try:
            return expert_in_turn(self, lambda d: self._intent.__setitem__(d.target, d))
        finally:
            self._intent = saved
