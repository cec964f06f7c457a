"""Fresh names: large pools of agent, item, room and software-team words, drawn anew per episode.

A coordinator trained on one fixed vocabulary learns the names instead of the rule (escape-room's
PPO-only coordinator: 1.000 on its training names, 0.080 on held-out ones). A world's ``names: fresh``
draws every episode's names from these pools, so the only thing that repeats is the rule.

Pools are built combinatorially (``"compass"``, ``"brass compass"``, ``"north parlor"``, ``"agent_G"``,
``"agent_KX7"``) and grouped by form (``NamePool``): a draw picks the form first, so a one-word item or a
one-letter agent, the held-out names' forms, is as common in training as a two-word one, though the
two-word forms hold 40x as many names. They are filtered against the worlds' fixed vocabularies: no
pooled name shares a word with the held-out test vocabulary or the default one (except words both use
as fixed scaffolding, such as ``agent``), so the held-out setting stays unseen and the default setting
stays fixed. ``draw`` takes names for one episode: distinct, none a prefix of another (scripted actions
such as ``pick X`` are matched on names, and a reader should not take one name for the start of another).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from teamtr.core import TeamTRError

# Words the worlds' own texts use as structure: a name made of them would read as part of a sentence.
RESERVED = frozenset({"hall", "door", "nothing", "idle", "held", "by", "at", "in", "only", "may",
                      "enter", "tick", "of", "the", "fetch", "open", "bug", "fix", "pair", "with",
                      "on", "goal", "waiting", "done", "wait", "work", "redo", "and", "or"})

# escape-room
AGENT_PREFIX = "agent_"
ITEM_ADJECTIVES = ("red", "blue", "green", "golden", "silver", "brass", "copper", "iron", "wooden",
                   "glass", "velvet", "leather", "paper", "jade", "ivory", "amber", "bronze", "black",
                   "white", "grey", "tiny", "heavy", "rusty", "shiny", "broken", "ancient", "painted",
                   "carved", "striped", "dusty", "small", "large", "bent", "cracked", "plain", "pink",
                   "purple", "yellow", "silk", "marble")
ITEM_NOUNS = ("compass", "lantern", "ledger", "chalice", "dagger", "helmet", "shield", "flask",
              "candle", "mirror", "goblet", "amulet", "ring", "crown", "sword", "hammer", "anchor",
              "clock", "feather", "skull", "bottle", "kettle", "ladder", "basket", "pouch", "satchel",
              "journal", "globe", "lens", "trumpet", "violin", "drum", "flute", "statue", "vase", "cup",
              "plate", "spoon", "whistle", "glove", "boot", "cloak", "hat", "belt", "quill", "chest",
              "box", "crate", "jar", "idol", "orb", "rod", "wand", "tablet", "sextant", "telescope",
              "beacon", "torch", "chain", "needle", "thimble", "brush", "comb", "fan", "pipe", "horn",
              "shell", "pearl", "ribbon", "medal", "ticket", "envelope", "diary", "atlas", "dice")
ZONE_ADJECTIVES = ("north", "south", "east", "west", "upper", "lower", "inner", "outer", "grand",
                   "hidden", "secret", "dark", "quiet", "narrow", "round", "long", "great", "middle",
                   "far", "old", "cold", "warm", "dim", "bright", "damp", "dry", "empty", "lofty",
                   "sunken", "royal")
ZONE_NOUNS = ("study", "parlor", "kitchen", "pantry", "gallery", "workshop", "office", "bedroom",
              "dungeon", "cave", "tunnel", "greenhouse", "barn", "stable", "shed", "garage", "basement",
              "ballroom", "courtyard", "balcony", "corridor", "closet", "nursery", "salon", "den",
              "foyer", "lobby", "observatory", "archive", "museum", "theater", "chamber", "cabin",
              "vestry", "granary", "forge", "smithy", "mill", "bunker", "studio", "lounge", "porch",
              "terrace", "sauna", "pavilion", "annex", "ward", "cell", "hangar", "depot", "storeroom",
              "treasury", "bakery", "brewery")

# software-team: role nouns per skill, with an optional qualifier ("lead_coder")
ROLE_QUALIFIERS = ("", "lead", "chief", "senior", "junior", "staff", "head", "core", "main", "prime",
                   "field", "team", "site", "remote")
ROLE_NOUNS = {
    "pm": ("planner", "producer", "steward", "organizer", "scheduler", "director", "strategist", "curator"),
    "architect": ("designer", "modeler", "drafter", "framer", "sketcher", "shaper", "outliner"),
    "engineer": ("coder", "programmer", "builder", "hacker", "maker", "implementer", "scripter", "crafter"),
    "qa": ("reviewer", "inspector", "verifier", "auditor", "checker", "validator", "examiner", "assessor"),
}
WORK_NAMES = {  # work item key -> names for it
    "prd": ("brief", "charter", "requirements", "proposal", "roadmap", "scope note", "story"),
    "design": ("schema", "layout", "diagram", "plan", "architecture", "wireframe", "structure"),
    "api": ("server", "engine", "data layer", "gateway", "kernel", "core library", "storage layer"),
    "ui": ("client", "dashboard", "console", "interface", "widget set", "web page", "viewer"),
    "integration": ("assembly", "hookup", "wiring", "coupling", "bundle", "linkup", "combination"),
    "tests": ("trials", "audit", "review", "inspection", "validation", "evaluation", "dry run"),
    "release": ("rollout", "shipment", "delivery", "publication", "debut", "handoff", "cutover"),
}
WORK_VERBS = {  # work item key -> verbs ("api" and "ui" share one per episode, as in the fixed vocabularies)
    "prd": ("compose", "author", "prepare", "pen"),
    "design": ("devise", "shape", "lay out", "map out"),
    "api": ("code", "program", "construct", "craft", "create"),
    "integration": ("combine", "join", "connect", "wire up", "link", "unite"),
    "tests": ("perform", "conduct", "carry out", "complete", "hold"),
    "release": ("publish", "deliver", "roll out", "push out", "deploy"),
}
GOAL_LABELS = ("aim", "stress", "emphasis", "rule", "order", "guidance", "agenda")
GOAL_LINKS = ("ahead of", "prior to", "above")
GOAL_FEATURES = ("extra parts", "added pieces", "more components", "further additions", "novel parts")


def words(texts: Iterable[str]) -> set[str]:
    """The lower-case words of ``texts`` (split on anything but letters and digits)."""
    return {w for text in texts for w in re.split(r"[^a-z0-9]+", text.lower()) if w}


def forbidden_words(default: Iterable[str], heldout: Iterable[str]) -> frozenset[str]:
    """Words fresh names must avoid: those of either fixed vocabulary, except the scaffolding both
    share (``agent``, ``the``), plus ``RESERVED``."""
    a, b = words(default), words(heldout)
    return frozenset((a | b) - (a & b)) | RESERVED


def combine(parts: Sequence[Sequence[str]], forbidden: frozenset[str], joiner: str = " ") -> tuple[str, ...]:
    """Every joined combination of ``parts`` (empty parts skipped) with no word in ``forbidden`` and
    no word repeated, in a fixed order."""
    out = []
    for combo in itertools.product(*parts):
        name = joiner.join(p for p in combo if p)
        ws = re.split(r"[^a-z0-9]+", name.lower())
        if name and not forbidden.intersection(ws) and len(set(ws)) == len(ws):
            out.append(name)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class NamePool:
    """Names grouped by form (one word or two; ``agent_`` + one letter or two, with a digit or
    without). ``pick`` draws a form uniformly, then a name of that form: each form is as common as any
    other however many names it holds. Drawing uniformly from all names instead made the forms of the
    held-out names rare or absent in training (one-word items and rooms: never; ``agent_P``: 0.6% of
    agents), so a test on them measured a change of form as well as of names."""

    forms: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if not self.forms or not all(self.forms):
            raise TeamTRError("a NamePool needs at least one form, and every form at least one name.")

    def __len__(self) -> int:
        return sum(len(form) for form in self.forms)

    def __iter__(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self.forms)

    def pick(self, rng: random.Random) -> str:
        form = self.forms[rng.randrange(len(self.forms))]
        return form[rng.randrange(len(form))]


def one_or_two_words(modifiers: Sequence[str], nouns: Sequence[str], forbidden: frozenset[str],
                     joiner: str = " ") -> NamePool:
    """``noun`` and ``modifier noun`` as two forms (``combine`` filters each)."""
    return NamePool((combine([nouns], forbidden), combine([modifiers, nouns], forbidden, joiner=joiner)))


def agent_pool(forbidden: frozenset[str]) -> NamePool:
    """``agent_`` + 1-2 capital letters + an optional digit, using only letters no fixed vocabulary
    uses as an agent suffix (so ``agent_PQ`` cannot echo the held-out ``agent_P``): ~2,300 names in
    four forms (``agent_G``, ``agent_GK``, ``agent_G7``, ``agent_GK7``)."""
    letters = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c.lower() not in forbidden]
    one, two = letters, [a + b for a in letters for b in letters]
    forms = (one, two, [x + d for x in one for d in "0123456789"], [x + d for x in two for d in "0123456789"])
    return NamePool(tuple(combine([[AGENT_PREFIX], suffixes], forbidden, joiner="") for suffixes in forms))


def _clashes(name: str, taken: Iterable[str]) -> bool:
    return any(name == t or name.startswith(t) or t.startswith(name) for t in taken)


def draw(rng: random.Random, pool: NamePool | Sequence[str], k: int, taken: list[str] | None = None) -> list[str]:
    """``k`` names from ``pool`` (a ``NamePool``: each a form first; else uniformly), distinct and none
    a prefix of another or of a name in ``taken`` (which grows by the names drawn, so several draws of
    one episode stay apart)."""
    taken = [] if taken is None else taken
    out: list[str] = []
    for _ in range(100 * k + 1000):
        if len(out) == k:
            return out
        name = pool.pick(rng) if isinstance(pool, NamePool) else pool[rng.randrange(len(pool))]
        if not _clashes(name, taken):
            out.append(name)
            taken.append(name)
    if len(out) == k:
        return out
    raise TeamTRError(f"names: fresh could not draw {k} distinct names from a pool of {len(pool)}; "
                      "the pool is too small for this many (use fewer agents, items or zones).")


def episode_rng(world: str, seed: int) -> random.Random:
    """The names' own random stream: independent of the world's dynamics draws for the same seed,
    so an episode with fresh names is the default episode renamed."""
    return random.Random(f"teamtr-names/{world}/{seed}")
