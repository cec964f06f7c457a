"""software-team: MetaGPT's software-company process, simulated tick by tick.

Roles: a product manager, an architect, 1-4 engineers and QA. Work items form a dependency graph,
each with a duration (ticks of work) and the skill it needs::

    PRD (pm, 2) -> design (architect, 2) -> API, UI modules (engineer, 3 each)
        -> integration (engineer, 2) -> tests (qa, 2) -> release (pm, 1)

When the tests finish, QA finds a bug with probability ``bug_rate`` (at most once an episode): the API
or UI module goes back to an engineer (one tick of fixing) and the tests must run again. The release
must ship before the ``deadline``. Nobody works without a directive, except engineers under a goal.

Directives of the seed's three kinds:
- schedule: "engineer_2: implement the UI module" (``do:ui``), offered for every item of the agent's
  skill: one whose dependencies are not done is invalid (the agent wastes the tick); one already
  done is a redo (``redo:ui``): the agent redoes it (``duplicate`` events) until given another.
- goal: "focus: integration before new features" / "focus: new features first": idle engineers pick
  the first ready item of that focus themselves (two may pick the same: ``conflict``).
- allocate: "pair engineer_1 with engineer_2 on the UI module": both work it at twice the speed;
  two engineers on one item *without* pairing get in each other's way (``conflict``, speed 1).
Primitive actions: ``work X``, ``pair X``, ``wait``.
"""

from __future__ import annotations

import random

from teamtr.core import NOOP, AgentView, Directive, Event, Outcome, expert_in_turn
from teamtr.envs import vocabulary as vocab
from teamtr.envs.registry import check_choice, check_float, check_int

# key -> (skill, duration, dependencies)
ITEMS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "prd": ("pm", 2, ()),
    "design": ("architect", 2, ("prd",)),
    "api": ("engineer", 3, ("design",)),
    "ui": ("engineer", 3, ("design",)),
    "integration": ("engineer", 2, ("api", "ui")),
    "tests": ("qa", 2, ("integration", "api", "ui")),
    "release": ("pm", 1, ("tests",)),
}
MODULES = ("api", "ui")
#: The phases of MetaGPT's process, for a hierarchical coordinator's goals (``goals()``).
PHASES: dict[str, tuple[str, ...]] = {"requirements": ("prd",), "design": ("design",),
                                      "development": ("api", "ui", "integration"), "test": ("tests", "release")}
GOALS = {"integration": ("fix", "integration"), "features": ("api", "ui")}
VOCAB = {
    "default": {
        "roles": {"pm": "product_manager", "architect": "architect", "qa": "qa", "engineer": "engineer"},
        "names": {"prd": "PRD", "design": "design", "api": "API module", "ui": "UI module",
                  "integration": "integration", "tests": "tests", "release": "release"},
        "verbs": {"prd": "write the PRD", "design": "write the design",
                  "api": "implement the API module", "ui": "implement the UI module",
                  "integration": "integrate the modules", "tests": "run the tests",
                  "release": "ship the release"},
        "goals": {"integration": "focus: integration before new features",
                  "features": "focus: new features first"},
    },
    "heldout": {  # disjoint words for the generalisation test
        "roles": {"pm": "product_owner", "architect": "tech_lead", "qa": "tester", "engineer": "developer"},
        "names": {"prd": "spec", "design": "blueprint", "api": "backend service", "ui": "frontend app",
                  "integration": "merge", "tests": "checks", "release": "launch"},
        "verbs": {"prd": "draft the spec", "design": "draw the blueprint",
                  "api": "build the backend service", "ui": "build the frontend app",
                  "integration": "merge the code", "tests": "execute the checks",
                  "release": "do the launch"},
        "goals": {"integration": "priority: merging over fresh work",
                  "features": "priority: fresh work first"},
    },
}
NAMES = (*VOCAB, "fresh")


def _texts(v: dict[str, dict[str, str]]) -> list[str]:
    return [text for part in v.values() for text in part.values()]


_FORBIDDEN = vocab.forbidden_words(_texts(VOCAB["default"]), _texts(VOCAB["heldout"]))
FRESH = {  # names: fresh draws each episode's words from these (see envs/vocabulary.py)
    "roles": {skill: vocab.one_or_two_words([q for q in vocab.ROLE_QUALIFIERS if q], nouns, _FORBIDDEN, joiner="_")
              for skill, nouns in vocab.ROLE_NOUNS.items()},
    "names": {key: vocab.combine([names], _FORBIDDEN) for key, names in vocab.WORK_NAMES.items()},
    "verbs": {key: vocab.combine([verbs], _FORBIDDEN) for key, verbs in vocab.WORK_VERBS.items()},
    "goals": {part: vocab.combine([words], _FORBIDDEN) for part, words in
              (("labels", vocab.GOAL_LABELS), ("links", vocab.GOAL_LINKS), ("features", vocab.GOAL_FEATURES))},
}


def fresh_vocabulary(seed: int) -> dict[str, dict[str, str]]:
    """One episode's words, drawn from ``FRESH`` (same seed, same words); shaped like ``VOCAB[...]``."""
    rng, taken = vocab.episode_rng("software-team", seed), []
    roles = {skill: vocab.draw(rng, pool, 1, taken)[0] for skill, pool in FRESH["roles"].items()}
    names = {key: vocab.draw(rng, pool, 1, taken)[0] for key, pool in FRESH["names"].items()}
    pick = {key: rng.choice(pool) for key, pool in FRESH["verbs"].items()}
    pick["ui"] = pick["api"]  # one verb for both modules, as in the fixed vocabularies
    verbs = {key: f"{pick[key]} the {name}" for key, name in names.items()}
    label, link, features = (rng.choice(FRESH["goals"][part]) for part in ("labels", "links", "features"))
    goals = {"integration": f"{label}: {names['integration']} {link} {features}",
             "features": f"{label}: {features} first"}
    return {"roles": roles, "names": names, "verbs": verbs, "goals": goals}


class SoftwareTeamWorld:
    """The software-team world (see the module docstring).

    Options: ``engineers`` (1-4), ``names`` (``default`` | ``heldout`` | ``fresh``: new role and
    work-item words drawn at every ``reset(seed)``, the same for the same seed), ``bug_rate`` (0-1),
    ``deadline`` (ticks; default ``deadline_for(engineers)``: the oracle's longest plan plus slack),
    ``compliance`` (0-1, the probability a role agent takes up a valid directive), ``task_text``
    (``full``: the task names the roles and the work order; ``generic``: it names none of them, the state
    lists the agents and the ready, done and waiting work, so every episode and name set with the same
    deadline shares one static prefix: with ``names: fresh`` no pass re-encodes a prefix per episode).
    """

    name = "software-team"
    team_size_option = ("engineers", 2)
    vocabulary_option = ("names", "heldout")

    def __init__(
        self,
        engineers: int = 2,
        names: str = "default",
        bug_rate: float = 0.5,
        deadline: int | None = None,
        compliance: float = 1.0,
        task_text: str = "full",
    ) -> None:
        check_int(self.name, "engineers", engineers, 1, 4)
        self.task_text = check_choice(self.name, "task_text", task_text, ("full", "generic"))
        self.names = check_choice(self.name, "names", names, NAMES)
        self.bug_rate = check_float(self.name, "bug_rate", bug_rate, 0.0, 1.0)
        self.compliance = check_float(self.name, "compliance", compliance, 0.0, 1.0)
        self.deadline = deadline_for(engineers) if deadline is None else deadline
        check_int(self.name, "deadline", self.deadline, 1, 10_000)
        self._engineers = engineers
        self._name_episode(0)
        self._progress: dict[str, int] = {}
        self._done: dict[str, bool] = {}
        self._bug: str | None = None
        self._bugged = False
        self._doing: dict[str, tuple[str, str] | None] = {}  # agent -> (mode, item) this tick
        self._goal: str | None = None
        self._tick = 0
        self._outcome: Outcome | None = None
        self._rng = random.Random(0)

    def _name_episode(self, seed: int) -> None:
        """Set the words, the agents and the task text (fixed ones, or this seed's fresh draw)."""
        self.vocab = fresh_vocabulary(seed) if self.names == "fresh" else VOCAB[self.names]
        roles, names = self.vocab["roles"], self.vocab["names"]
        self.engineers = [f"{roles['engineer']}_{i + 1}" for i in range(self._engineers)]
        self.agents = [roles["pm"], roles["architect"], *self.engineers, roles["qa"]]
        self.skill = {roles["pm"]: "pm", roles["architect"]: "architect", roles["qa"]: "qa"}
        self.skill.update(dict.fromkeys(self.engineers, "engineer"))
        if self.task_text == "generic":  # the state names the agents and the work; this text is the same for all
            self.task = (
                f"Software project: the state lists each agent and what it does. Finish by tick {self.deadline}. "
                "A task starts once the tasks it needs are done; the state shows the ready ones with their "
                "progress and what is waiting. Two agents of one role paired on a task go twice as fast. A bug "
                "may send a finished task back. Agents keep their directive until given another."
            )
            return
        chain = " -> ".join(names[k] for k in ("prd", "design")) + f" -> {names['api']} and " \
            f"{names['ui']} -> " + " -> ".join(names[k] for k in ("integration", "tests", "release"))
        self.task = (
            f"Software team: {', '.join(self.agents)}. Ship the {names['release']} by tick "
            f"{self.deadline}. Work order: {chain}. {roles['engineer']}s build modules; paired "
            f"{roles['engineer']}s work twice as fast. The {roles['qa']} may find a bug that sends a "
            "module back. Agents keep their directive until given a new one."
        )

    def reset(self, seed: int) -> None:
        if self.names == "fresh":
            self._name_episode(seed)
        self._rng = random.Random(seed)
        self._progress = dict.fromkeys(ITEMS, 0)
        self._done = dict.fromkeys(ITEMS, False)
        self._bug, self._bugged, self._goal = None, False, None
        self._doing = dict.fromkeys(self.agents)
        self._tick, self._outcome = 0, None

    # -- state -----------------------------------------------------------------------------------
    def _ready(self, item: str) -> bool:
        return not self._done[item] and all(self._done[dep] for dep in ITEMS[item][2])

    def _label(self, item: str) -> str:
        name = self.vocab["names"][item]
        if item == self._bug:
            return f"{name}: bug found"
        if self._done[item]:
            return f"{name}: done"
        if self._ready(item):
            return f"{name}: {self._progress[item]}/{ITEMS[item][1]}"
        return ""

    def describe(self) -> str:
        parts = [f"tick {self._tick} of {self.deadline}."]
        parts += [f"{label}." for label in map(self._label, ITEMS) if label]
        waiting = [self.vocab["names"][k] for k in ITEMS if not self._done[k] and not self._ready(k)]
        if waiting:
            parts.append(f"waiting: {', '.join(waiting)}.")
        for agent in self.agents:
            doing = self._doing[agent]
            stale = doing is None or (doing[0] != "redo" and self._done[doing[1]])
            work = "idle" if stale else f"{doing[0]} {self.vocab['names'][doing[1]]}"
            parts.append(f"{agent}: {work}.")
        if self._goal:
            parts.append(f"goal: {self.vocab['goals'][self._goal]}.")
        return " ".join(parts)

    def view(self, agent: str) -> AgentView:
        able = [k for k in ITEMS if ITEMS[k][0] == self.skill[agent] and self._ready(k)]
        actions = ("wait", *(f"work {k}" for k in able), *(f"pair {k}" for k in able
                                                            if self.skill[agent] == "engineer"))
        return AgentView(agent, f"{agent} ({self.skill[agent]}). {self.describe()}", actions)

    # -- directives ------------------------------------------------------------------------------
    def _verb(self, item: str) -> str:
        if item == self._bug:
            return f"fix the {self.vocab['names'][item]} bug"
        return self.vocab["verbs"][item]

    def directives(self) -> list[Directive]:
        out = []
        for agent in self.agents:  # every item of the agent's skill: waiting ones are invalid
            for item, (skill, _, _) in ITEMS.items():
                if skill == self.skill[agent]:
                    task = f"redo:{item}" if self._done[item] else f"do:{item}"
                    out.append(Directive(f"{agent}: {self._verb(item)}", agent, task))
        for key, text in self.vocab["goals"].items():
            out.append(Directive(text, None, f"goal:{key}", "goal"))
        ready = [k for k in ITEMS if ITEMS[k][0] == "engineer" and self._ready(k)]
        for i, first in enumerate(self.engineers):
            for second in self.engineers[i + 1:]:
                out += [Directive(f"pair {first} with {second} on the {self.vocab['names'][k]}",
                                  f"{first}+{second}", f"pair:{k}", "allocate") for k in ready]
        return out

    def check(self, agent: str, directive: Directive) -> str | None:
        mode, _, item = directive.task.partition(":")
        if mode == "goal":
            return None
        if item not in ITEMS or mode not in ("do", "redo", "pair"):
            return f"software-team has no task {directive.task!r}"
        skill, _, deps = ITEMS[item]
        if skill != self.skill[agent]:
            return f"{agent} is not a {skill}"
        missing = [self.vocab["names"][d] for d in deps if not self._done[d]]
        return f"waits for {', '.join(missing)}" if missing else None

    def done(self, agent: str, directive: Directive) -> bool:
        mode, _, item = directive.task.partition(":")
        # A redo never finishes: the agent keeps redoing finished work until redirected.
        return mode in ("do", "pair") and self._done.get(item, False)

    def plan(self, agent: str, directive: Directive | None) -> str:
        # The world remembers what each agent works on: describe() and the oracle report it.
        self._doing[agent] = None
        if directive is None or directive.kind == "noop":
            return "wait"
        mode, _, item = directive.task.partition(":")
        if mode == "goal":
            self._goal = item
            if self.skill[agent] != "engineer":
                return "wait"
            order = MODULES if item == "features" else (self._bug, "integration")
            picks = [k for k in order if k is not None and self._ready(k)]
            if not picks:
                return "wait"
            mode, item = "do", picks[0]
        self._doing[agent] = ({"do": "work", "redo": "redo", "pair": "pair"}[mode], item)
        return f"{'pair' if mode == 'pair' else 'work'} {item}"

    # -- phase goals (a hierarchical coordinator's strategic level) -----------------------------
    def _phase_goal(self, phase: str) -> Directive:
        items = ", ".join(self.vocab["names"][k] for k in PHASES[phase])
        return Directive(f"phase: {phase} ({items})", None, f"phase:{phase}", "goal")

    def goals(self) -> list[Directive]:
        """One goal per phase with work left (a bug reopens development), in process order."""
        return [self._phase_goal(p) for p, items in PHASES.items() if not all(self._done[k] for k in items)]

    def expert_goal(self) -> Directive:
        """The earliest phase with work left."""
        return self.goals()[0]

    # -- dynamics --------------------------------------------------------------------------------
    def step(self, actions: dict[str, str]) -> list[Event]:
        if self._outcome is not None:
            return []
        events: list[Event] = []
        workers: dict[str, list[tuple[str, str]]] = {}
        for agent in self.agents:
            verb, _, item = actions.get(agent, "wait").partition(" ")
            if verb in ("work", "pair") and item in ITEMS and ITEMS[item][0] == self.skill[agent] \
                    and all(self._done[d] for d in ITEMS[item][2]):
                workers.setdefault(item, []).append((agent, verb))
            elif any(ITEMS[k][0] == self.skill[agent] and self._ready(k) for k in ITEMS):
                events.append(Event("idle", agent, "an able agent waited"))
        for item, crew in workers.items():
            if self._done[item]:
                events += [Event("duplicate", agent, f"{item} was already done") for agent, _ in crew]
                continue
            paired = len(crew) == 2 and all(verb == "pair" for _, verb in crew)
            if len(crew) > 1 and not paired:
                events += [Event("conflict", agent, f"{len(crew)} agents on the {self.vocab['names'][item]}")
                           for agent, _ in crew[1:]]
            self._progress[item] += 2 if paired else 1
            if self._progress[item] >= ITEMS[item][1]:
                events += self._finish(item, crew[0][0])
        self._tick += 1
        if self._outcome is None and self._tick >= self.deadline:
            self._outcome = "failure"
            events.append(Event("failure", None, f"deadline {self.deadline}"))
        return events

    def _finish(self, item: str, agent: str) -> list[Event]:
        fixed = item == self._bug
        self._done[item], self._progress[item] = True, ITEMS[item][1]
        events = [Event("milestone", agent, f"{self.vocab['names'][item]} {'fixed' if fixed else 'done'}")]
        if fixed:
            self._bug = None
        if item == "tests" and not self._bugged and self._rng.random() < self.bug_rate:
            self._bugged = True
            self._bug = self._rng.choice(MODULES)
            self._done[self._bug], self._progress[self._bug] = False, ITEMS[self._bug][1] - 1
            self._done["tests"], self._progress["tests"] = False, 0
            names = self.vocab["names"]
            events[0] = Event("milestone", agent, f"{names['tests']} found a bug in the {names[self._bug]}")
        if item == "release":
            self._outcome = "success"
            events.append(Event("success", agent, "released"))
        return events

    def outcome(self) -> Outcome | None:
        return self._outcome

    def truncated(self) -> bool:
        """Never: shipping by the deadline is the task, so missing it is the task's failure."""
        return False

    def decision_due(self) -> bool:
        return True

    # -- oracle ----------------------------------------------------------------------------------
    def _free(self, agent: str) -> bool:
        doing = self._doing[agent]
        return doing is None or doing[0] == "redo" or self._done[doing[1]]

    def expert_directive(self) -> Directive:
        """Deterministic in the state text: give ready non-engineering work to its free owner;
        then unstarted engineering work (bug fix, API, UI, integration) to the first free engineer,
        pairing two free engineers on the integration; then pair a free engineer with one working
        alone on a module with 2+ ticks left; otherwise no new directive."""
        owned = {skill: agent for agent, skill in self.skill.items() if skill != "engineer"}
        for item, (skill, _, _) in ITEMS.items():
            if skill != "engineer" and self._ready(item) and self._free(owned[skill]):
                return Directive(f"{owned[skill]}: {self._verb(item)}", owned[skill], f"do:{item}")
        free = [e for e in self.engineers if self._free(e)]
        if not free:
            return NOOP
        taken = {doing[1] for e in self.engineers if (doing := self._doing[e]) and not self._free(e)}
        order = sorted(MODULES, key=lambda k: k != self._bug) + ["integration"]
        for item in (k for k in order if self._ready(k) and k not in taken):
            if item == "integration" and len(free) >= 2:
                return self._pair(free[0], free[1], item)
            return Directive(f"{free[0]}: {self._verb(item)}", free[0], f"do:{item}")
        for item in (k for k in order if k in taken):
            crew = [e for e in self.engineers if self._doing[e] and self._doing[e][1] == item]
            if len(crew) == 1 and ITEMS[item][1] - self._progress[item] >= 2:
                first, second = sorted([free[0], crew[0]], key=self.engineers.index)
                return self._pair(first, second, item)
        return NOOP

    def expert_directives(self) -> list[Directive]:
        """The whole-team oracle: ``expert_directive`` asked again with each answer in force. A
        whole-team output has no line for a pair (``policy.whole_team``), so a pair on work nobody
        has started goes to its first engineer alone, and a pair joining someone ends the lines."""
        saved = dict(self._doing)

        def alone(directive: Directive) -> Directive | None:
            mode, _, item = directive.task.partition(":")
            if mode != "pair":
                return directive
            if any(doing and doing[1] == item for doing in self._doing.values()):
                return None
            first = (directive.target or "").split("+")[0]
            return Directive(f"{first}: {self._verb(item)}", first, f"do:{item}")

        def assign(directive: Directive) -> None:
            self._doing[directive.target or ""] = ("work", directive.task.partition(":")[2])

        try:
            return expert_in_turn(self, assign, alone)
        finally:
            self._doing = saved

    def _pair(self, first: str, second: str, item: str) -> Directive:
        return Directive(f"pair {first} with {second} on the {self.vocab['names'][item]}",
                         f"{first}+{second}", f"pair:{item}", "allocate")


def deadline_for(engineers: int) -> int:
    """Default deadline: the oracle's longest episode (with a bug) plus 3 ticks of slack."""
    return {1: 21, 2: 18, 3: 17, 4: 17}[engineers]
