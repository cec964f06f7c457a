"""Chef sub-tasks for the Overcooked world: where to walk, when a sub-task is possible or done.

``Kitchen`` wraps one layout's ``OvercookedGridworld`` (rules) and ``MotionPlanner`` (shortest
plans from any (position, orientation) to any feature-facing goal), both from the ``overcooked``
package. It knows nothing of directives' texts beyond ``TASKS``; ``overcooked.py`` is the World.

Positions are the package's (x, y) tuples, x to the right and y down. A *region* is a 4-connected
set of floor cells: on forced_coordination the two chefs live in different regions and can only
hand items over the *shared counters* that touch both.
"""

from __future__ import annotations

from typing import Any

from teamtr.core import Directive, Event

Pos = tuple[int, int]

#: sub-task -> directive words after "chef_i: " (short: the 135M coordinator scores every one).
TASKS: dict[str, str] = {
    "pot_onion": "put an onion in the pot",
    "start_cooking": "start the cooking",
    "fetch_dish": "fetch a dish",
    "serve_soup": "carry the soup to the serving window",
    "pass_onion": "pass an onion over the counter",
    "pass_dish": "pass a dish over the counter",
    "drop": "put down what you hold",
    "wait": "wait",
}
_KITCHENS: dict[str, "Kitchen"] = {}  # layout -> Kitchen, built once per process
_ACTION_NAMES = {(0, -1): "up", (0, 1): "down", (1, 0): "right", (-1, 0): "left", (0, 0): "stay", "interact": "interact"}


def directive(agent: str, task: str) -> Directive:
    """The directive that gives ``task`` to ``agent`` (all are communication scheduling)."""
    return Directive(text=f"{agent}: {TASKS[task]}", target=agent, task=task, kind="schedule")


def held(player: Any) -> str | None:
    """Name of what a chef holds (``onion``, ``dish``, ``soup``) or ``None``."""
    return player.held_object.name if player.held_object is not None else None


def effect_done(task: str, flags: dict[str, list[bool]], i: int, before: Any, after: Any, mdp: Any) -> bool:
    """True when chef ``i``'s tick ``before -> after`` finished ``task`` (game event flags ``flags``)."""
    if task == "pot_onion":
        return bool(flags["potting_onion"][i])
    if task == "serve_soup":
        return bool(flags["soup_delivery"][i])
    if task == "fetch_dish":
        return bool(flags["dish_pickup"][i])
    if task == "pass_onion":
        return bool(flags["onion_drop"][i])
    if task == "pass_dish":
        return bool(flags["dish_drop"][i])
    if task == "drop":
        return any(flags[k][i] for k in ("onion_drop", "dish_drop", "soup_drop"))
    if task == "start_cooking":
        p = before.players[i]
        pot = (p.position[0] + p.orientation[0], p.position[1] + p.orientation[1])
        return (pot in mdp.get_pot_locations() and before.has_object(pot) and before.get_object(pot).is_idle
                and after.has_object(pot) and not after.get_object(pot).is_idle)
    return False


def kitchen(layout: str, mdp: Any, mp: Any) -> "Kitchen":
    """The ``Kitchen`` of ``layout`` (memoised: a world drawing layouts per episode reuses them)."""
    if layout not in _KITCHENS:
        _KITCHENS[layout] = Kitchen(mdp, mp)
    return _KITCHENS[layout]


class Kitchen:
    """Static facts of one layout plus the sub-task logic of a chef (no episode state)."""

    def __init__(self, mdp: Any, mp: Any) -> None:
        self.mdp, self.mp = mdp, mp
        self.grid = ["".join("." if c == " " else c for c in row) for row in mdp.terrain_mtx]
        floor = set(mdp.get_valid_player_positions())
        self.region: dict[Pos, int] = {}
        for start in sorted(floor):
            if start in self.region:
                continue
            stack, rid = [start], len(set(self.region.values()))
            while stack:
                x, y = stack.pop()
                if (x, y) in self.region:
                    continue
                self.region[(x, y)] = rid
                stack += [n for n in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)) if n in floor and n not in self.region]
        # Which regions can interact with each feature (a goal cell facing it lies in the region).
        self.feat_regions = {f: {self.region[g[0]] for g in goals} for f, goals in mp.motion_goals_for_pos.items()}
        self.pots = mdp.get_pot_locations()
        self.server = self.pick_server(mdp.get_standard_start_state())

    # ------------------------------------------------------------------------------ queries
    def reach(self, state: Any, i: int, feats: list[Pos]) -> list[Pos]:
        rid = self.region[state.players[i].position]
        return [f for f in feats if rid in self.feat_regions.get(f, ())]

    def split(self, state: Any) -> bool:
        """True when the two chefs stand in different regions (items must cross counters)."""
        return self.region[state.players[0].position] != self.region[state.players[1].position]

    def shared_counters(self, state: Any, empty: bool = True) -> list[Pos]:
        both = {self.region[p.position] for p in state.players}
        return [c for c in self.mdp.get_counter_locations() if both <= self.feat_regions.get(c, set())
                and (not empty or not state.has_object(c))]

    def on_counters(self, state: Any, name: str) -> list[Pos]:
        return [pos for pos, o in state.objects.items() if o.name == name and pos not in self.pots]

    def pots_by(self, state: Any) -> dict[str, list[Pos]]:
        """Pot positions by status: room (fewer than 3 onions, idle), full (3, idle), cooking, ready."""
        ps = self.mdp.get_pot_states(state)
        return {"room": ps["empty"] + ps["1_items"] + ps["2_items"], "full": ps["3_items"],
                "cooking": ps["cooking"], "ready": ps["ready"], "partial": ps["1_items"] + ps["2_items"]}

    # ---------------------------------------------------------------------------- sub-tasks
    def targets(self, state: Any, i: int, task: str) -> tuple[list[Pos], str | None]:
        """Features chef ``i`` should walk to and interact with for ``task``, or why it cannot."""
        h, pots, mdp = held(state.players[i]), self.pots_by(state), self.mdp
        r = lambda feats: self.reach(state, i, feats)  # noqa: E731 - short local alias
        onions = r(mdp.get_onion_dispenser_locations() + self.on_counters(state, "onion"))
        dishes = r(mdp.get_dish_dispenser_locations() + self.on_counters(state, "dish"))
        coming = r(pots["ready"]) or r(pots["cooking"]) or r(pots["full"]) or r(pots["partial"])
        if task == "wait":
            return [], None
        if task == "drop":
            if h is None:
                return [], "its hands are empty"
            free = r(self.shared_counters(state)) if self.split(state) else []
            free = free or r(self.mdp.get_empty_counter_locations(state))
            return free, None if free else "no free counter in reach"
        if task in ("pass_onion", "pass_dish"):
            item = task[5:]
            if not self.split(state):
                return [], "the other chef can reach everything itself"
            if h not in (None, item):
                return [], f"it holds {h}"
            if h == item:
                free = r(self.shared_counters(state))
                return free, None if free else "no free shared counter"
            src = r(mdp.get_onion_dispenser_locations() if item == "onion" else mdp.get_dish_dispenser_locations())
            ok = src and r(self.shared_counters(state))
            return src, None if ok else f"it cannot pass a {item}"
        if task == "pot_onion":
            room = r(pots["room"])
            if h not in (None, "onion"):
                return [], f"it holds {h}"
            # Fetching ahead for a busy pot is fine while the other chef can serve it; a lone cook
            # holding an onion could never take the soup out.
            busy = r(pots["full"] + pots["cooking"] + pots["ready"]) if self.reach(state, 1 - i, self.pots) else []
            if not room and not busy:
                return [], "no pot in reach has room"
            if h == "onion":  # with every pot busy, hold the onion until one is emptied
                return room, None
            return onions, None if onions else "no onion in reach"
        if task == "start_cooking":
            if h is not None:
                return [], f"it holds {h}"
            full = r(pots["full"])
            return full, None if full else "no full pot to start"
        if task == "fetch_dish":
            if h is not None:
                return [], f"it holds {h}"
            return dishes, None if dishes else "no dish in reach"
        if task == "serve_soup":
            if h == "soup":
                return r(mdp.get_serving_locations()), None
            if h == "onion":
                return [], "it holds onion"
            if not coming:
                return [], "every pot is empty"
            if h == "dish":
                return coming, None
            soup = r(self.on_counters(state, "soup"))
            return (soup or dishes), None if (soup or dishes) else "no dish in reach"
        return [], f"unknown sub-task {task!r}"

    def check(self, state: Any, i: int, task: str) -> str | None:
        return self.targets(state, i, task)[1]

    def step_toward(self, state: Any, i: int, task: str, detour: bool = False) -> tuple[str | None, Any]:
        """(next primitive action, motion goal) for chef ``i`` on ``task``; ``stay`` if none.

        ``detour``: the chef was blocked by the other one, whom the package's planner ignores;
        walk a shortest path around the other chef's cell instead (action ``None``: there is none).
        """
        feats, reason = self.targets(state, i, task)
        if reason is not None or not feats:
            return "stay", None
        start = state.players[i].pos_and_or
        best = None
        for f in feats:
            for goal in self.mp.motion_goals_for_pos[f]:
                plan = self.mp.all_plans.get((start, goal))
                if plan is not None and (best is None or plan[2] < best[0]):
                    best = (plan[2], plan[0][0], goal)
        if best is None:
            return "stay", None
        here, there = state.players[i].position, best[2][0]
        if detour and here != there:
            return self.first_step_around(here, there, state.players[1 - i].position), best[2]
        return _ACTION_NAMES[best[1]], best[2]

    def first_step_around(self, start: Pos, goal: Pos, blocked: Pos) -> str | None:
        """First move of a shortest floor path from ``start`` to ``goal`` avoiding ``blocked``."""
        moves = [(name, d) for d, name in _ACTION_NAMES.items() if d not in ((0, 0), "interact")]
        first: dict[Pos, str | None] = {start: None}
        frontier = [start]
        while frontier:
            nxt = []
            for x, y in frontier:
                for name, (dx, dy) in moves:
                    cell = (x + dx, y + dy)
                    if cell in self.region and cell != blocked and cell not in first:
                        first[cell] = first[(x, y)] or name
                        if cell == goal:
                            return first[cell]
                        nxt.append(cell)
            frontier = nxt
        return None

    def is_floor_ahead(self, player: Any, move: Any) -> bool:
        ahead = (player.position[0] + move[0], player.position[1] + move[1])
        return ahead in self.region

    # ------------------------------------------------------------------------ coordination
    def greedy_task(self, state: Any, i: int) -> str:
        """No coordinator: each chef's fixed greedy rule, blind to what the other chef plans."""
        h, other = held(state.players[i]), held(state.players[1 - i])
        ok = lambda t: self.check(state, i, t) is None  # noqa: E731
        cooking = self.reach(state, i, sum((self.pots_by(state)[k] for k in ("ready", "cooking", "full")), []))
        if h == "soup" or (h == "dish" and cooking):
            return "serve_soup"
        if h == "onion":
            return "pot_onion" if ok("pot_onion") else ("pass_onion" if ok("pass_onion") else "drop")
        if h is not None:
            return "pass_dish" if ok("pass_dish") else "drop"
        if ok("start_cooking"):
            return "start_cooking"
        if not self.reach(state, i, self.pots):  # a runner: keep the shared counters stocked
            if len(self.on_counters(state, "onion")) < 2 and ok("pass_onion"):
                return "pass_onion"
            return "pass_dish" if not self.on_counters(state, "dish") and ok("pass_dish") else "wait"
        if cooking and other != "dish" and ok("serve_soup"):
            return "serve_soup"
        return "pot_onion" if ok("pot_onion") else "wait"

    def expert_task(self, state: Any, i: int) -> str:
        """Heuristic coordinator: a runner/cook split when regions differ, else potter/server."""
        h, other = held(state.players[i]), held(state.players[1 - i])
        ok = lambda t: self.check(state, i, t) is None  # noqa: E731
        pots = self.pots_by(state)
        coming = len(pots["ready"] + pots["cooking"] + pots["full"])
        dishes_out = len(self.on_counters(state, "dish")) + (other == "dish")
        room = sum(3 - len(state.get_object(p).ingredients) if state.has_object(p) else 3 for p in pots["room"])
        if self.reach(state, 1 - i, self.pots):  # the other chef may empty busy pots soon
            room += 3 * len(self.reach(state, i, pots["cooking"] + pots["ready"]))
        onions_out = len(self.on_counters(state, "onion")) + (other == "onion")
        cook_alone = not self.reach(state, 1 - i, self.pots)  # only this chef can fill the pots
        if h == "soup" or (h == "dish" and ok("serve_soup") and (coming or not cook_alone)):
            return "serve_soup"
        if h == "onion":
            if other == "onion" and i == self.server and not self.reach(state, i, pots["room"]) and ok("drop"):
                # Both chefs hold an onion and no pot has room: nobody has a hand free for a dish, so
                # holding on (pot_onion, valid while a pot is busy) would wait forever. The server lets go.
                return "drop"
            return next(t for t in ("pot_onion", "pass_onion", "drop", "wait") if ok(t))
        if h == "dish":
            return next(t for t in ("pass_dish", "drop", "wait") if ok(t))
        if ok("start_cooking"):
            return "start_cooking"
        if not self.reach(state, i, self.pots):  # runner on the far side of the counter
            if coming + bool(pots["partial"]) > dishes_out and ok("pass_dish"):
                return "pass_dish"
            return "pass_onion" if room > onions_out and ok("pass_onion") else "wait"
        if cook_alone:  # cook on the pot side: use what the runner passes, ready soups first
            dish_here = bool(self.on_counters(state, "dish"))
            if pots["ready"] and dish_here and ok("serve_soup"):
                return "serve_soup"
            if self.on_counters(state, "onion") and ok("pot_onion"):
                return "pot_onion"
            return "serve_soup" if coming and dish_here and ok("serve_soup") else "wait"
        # Same side: what lies on counters is free to take, only what the other chef holds is spoken
        # for (an onion left on a counter counted as on its way once, and with the other chef's hands
        # full of a dish nobody took it: the pot waited one onion short to the end).
        held_dish = int(other == "dish")
        server = coming > held_dish or (pots["partial"] and room <= onions_out + 1 and not held_dish)
        if i == self.server and server and ok("serve_soup"):
            return "serve_soup"
        if room > int(other == "onion") and ok("pot_onion"):
            return "pot_onion"
        if coming > held_dish and ok("serve_soup"):
            return "serve_soup"
        # Nothing to bring to the pots: fetch the dish the soup will need rather than stand by. A chef
        # standing by at the only pot blocks the other's last onion (cramped_room: 8.46 -> 10.38 soups
        # per 400 ticks over 100 seeds, session 28).
        if (coming or pots["partial"]) and not dishes_out and ok("serve_soup"):
            return "serve_soup"
        return "wait"

    def pick_server(self, state: Any) -> int:
        """At the start: the chef nearer the dishes plus the serving window serves (ties: the one
        relatively nearer the dishes than the onions; then chef_0)."""
        keys = []
        for i, p in enumerate(state.players):
            cost = {name: self.mp.min_cost_to_feature(p.pos_and_or, feats)[0] for name, feats in (
                ("dish", self.mdp.get_dish_dispenser_locations()), ("serve", self.mdp.get_serving_locations()),
                ("onion", self.mdp.get_onion_dispenser_locations()))}
            keys.append((cost["dish"] + cost["serve"], cost["dish"] - cost["onion"], i))
        self.server = min(keys)[2]
        return self.server

    # ------------------------------------------------------------------------------- texts
    def pot_text(self, state: Any, k: int, pos: Pos) -> str:
        if not state.has_object(pos):
            return f"pot {k + 1} empty"
        soup = state.get_object(pos)
        if soup.is_ready:
            return f"pot {k + 1} ready"
        if soup.is_cooking:
            return f"pot {k + 1} cooking {soup._cooking_tick}/{soup.cook_time}"
        return f"pot {k + 1} has {len(soup.ingredients)} onions"

    def nearest(self, player: Any) -> str:
        """``the onions``, ``the dishes``, ``a pot`` or ``the window``: the feature ``player`` reaches
        in the fewest ticks (the motion planner's cost; ties in that order)."""
        mdp, best = self.mdp, (float("inf"), "")
        for name, feats in (("the onions", mdp.get_onion_dispenser_locations()), ("the dishes", mdp.get_dish_dispenser_locations()),
                            ("a pot", self.pots), ("the window", mdp.get_serving_locations())):
            best = min(best, (self.mp.min_cost_to_feature(player.pos_and_or, feats)[0], name), key=lambda c: c[0])
        return best[1]

    def feature_name(self, goal: Any) -> str:
        (x, y), (dx, dy) = goal
        names = {"P": "a pot", "O": "the onions", "D": "the dishes", "S": "the serving window", "X": "a counter"}
        return names.get(self.mdp.get_terrain_type_at_pos((x + dx, y + dy)), "a feature")

    def pot_events(self, before: Any, after: Any) -> list[Event]:
        events = []
        for pot in self.pots:
            was = before.get_object(pot) if before.has_object(pot) else None
            now = after.get_object(pot) if after.has_object(pot) else None
            if now is not None and not now.is_idle and (was is None or was.is_idle):
                events.append(Event("milestone", None, "cooking started"))
            if now is not None and now.is_ready and not (was is not None and was.is_ready):
                events.append(Event("milestone", None, "soup cooked"))
            if was is not None and was.is_ready and now is None:
                events.append(Event("milestone", None, "soup taken from the pot"))
        return events

    def pre_step_events(self, state: Any, joint: list[Any], agents: list[str]) -> list[Event]:
        """``duplicate``: a chef takes a dish from the dispenser while no soup needs one."""
        events = []
        pots = self.pots_by(state)
        soups = len(pots["ready"] + pots["cooking"] + pots["full"] + pots["partial"])
        for i, p in enumerate(state.players):
            ahead = (p.position[0] + p.orientation[0], p.position[1] + p.orientation[1])
            if joint[i] == "interact" and p.held_object is None and self.mdp.get_terrain_type_at_pos(ahead) == "D":
                out = len(self.on_counters(state, "dish")) + sum(held(q) == "dish" for q in state.players)
                if out >= soups:
                    events.append(Event("duplicate", agents[i], "dish fetched with no soup coming"))
        return events
