"""The report's episode viewer: episodes picked from a run's transcripts, embedded as JSON in the page
with the viewer's inline script and style (``viewer.js``, ``viewer.css``: no network, no CDN).

Files read (one JSON object per line; a torn or unreadable line is skipped):

``RUN/transcripts.jsonl``, written by the trainer (``train/collect.py``), one training episode a line::

    {"iteration": int, "seed": int, "task": str, "success": bool, "return": float, "steps": [STEP, ...]}

``RUN/eval_transcripts.jsonl``, written by the final evaluation, one held-out episode a line: the same
keys (``iteration`` may be absent) plus ``"policy": str``, the row of the end-of-run table it belongs
to ("trained", "zero-shot", ...). Its steps carry ``probs``.

``STEP`` is one decision of the coordinator::

    {"tick": int,                 # world tick at which the decision was taken
     "state": str,                # the state text the coordinator read
     "history": [str, ...],       # the recent directives it was shown
     "candidates": [str, ...],    # the directives it could choose from, in order
     "choice": int,               # index into candidates of the one chosen
     "directive": str,            # the chosen directive's text
     "reward": float,             # the team's reward for this decision
     "events": [str, ...],        # kinds of the events the decision led to
     # optional:
     "probs": [float, ...],       # the coordinator's probability of each candidate (len(candidates))
     "terms": {str: float},       # reward term -> value (they sum to reward)
     "actions": {str: str}}       # role agent -> the action it took in this decision's ticks

Only a bounded sample reaches the page (``ViewerLimits``): training episodes spread evenly over the
run, and per policy of the final evaluation a balance of successes and failures. All text reaches the
page as data and is shown with ``textContent``, never as markup: worlds and teammates write it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from teamtr.telemetry.log import EVAL_TRANSCRIPTS_FILE, TRANSCRIPTS_FILE

_STEP_TEXT_KEYS = ("state", "directive")
_STEP_LIST_KEYS = ("history", "candidates", "events")


@dataclass(frozen=True)
class ViewerLimits:
    """What bounds the page: episodes per source, decisions per episode, characters per text, and
    the embedded JSON's total size (episodes past it are left out, round-robin over the groups)."""

    train_episodes: int = 24
    eval_episodes: int = 12  # per policy, half successes and half failures where there are both
    steps: int = 150
    text_chars: int = 2000
    total_bytes: int = 8_000_000


DEFAULT_LIMITS = ViewerLimits()


def read_episodes(path: Path) -> Iterator[dict[str, Any]]:
    """Each episode object of a transcripts file, streamed; lines that are not one are skipped (a
    report is drawn from whatever a run, maybe killed mid-write, left)."""
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                episode = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(episode, dict) and isinstance(episode.get("steps", []), list):
                yield episode


def spread(count: int, n: int) -> list[int]:
    """``min(n, count)`` indices into ``range(count)`` evenly spread, first and last included."""
    if n <= 0 or count <= 0:
        return []
    if count <= n:
        return list(range(count))
    if n == 1:
        return [count - 1]
    return sorted({round(i * (count - 1) / (n - 1)) for i in range(n)})


def training_sample(path: Path, n: int) -> list[dict[str, Any]]:
    """``n`` training episodes spread evenly over the file (two passes, so memory holds ``n``)."""
    keep = set(spread(sum(1 for _ in read_episodes(path)), n))
    return [episode for index, episode in enumerate(read_episodes(path)) if index in keep]


def eval_sample(path: Path, n: int) -> dict[str, list[dict[str, Any]]]:
    """Per policy (in file order), up to ``n`` episodes: successes and failures alternating, so both
    show where both exist; memory holds at most ``n`` of each per policy."""
    kept: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for episode in read_episodes(path):
        wins, losses = kept.setdefault(str(episode.get("policy", "?")), ([], []))
        bucket = wins if episode.get("success") else losses
        if len(bucket) < n:
            bucket.append(episode)
    out: dict[str, list[dict[str, Any]]] = {}
    for policy, (wins, losses) in kept.items():
        mixed = [e for pair in zip(wins, losses) for e in pair]
        rest = wins[len(losses):] + losses[len(wins):]
        out[policy] = (mixed + rest)[:n]
    return out


def _text(value: Any, limit: int) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more characters]"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _step(step: Any, limits: ViewerLimits) -> dict[str, Any]:
    """One step reduced to what the viewer reads, texts cut to ``limits.text_chars``."""
    step = step if isinstance(step, dict) else {}
    out: dict[str, Any] = {"tick": _number(step.get("tick")), "choice": _number(step.get("choice")),
                           "reward": _number(step.get("reward"))}
    out.update({key: _text(step.get(key), limits.text_chars) for key in _STEP_TEXT_KEYS})
    for key in _STEP_LIST_KEYS:
        items = step.get(key)
        out[key] = [_text(item, limits.text_chars) for item in items] if isinstance(items, list) else []
    probs = step.get("probs")
    if isinstance(probs, list) and len(probs) == len(out["candidates"]):
        out["probs"] = [_number(p) for p in probs]
    for key in ("terms", "actions"):
        if isinstance(step.get(key), dict):
            out[key] = {_text(k, 200): (_number(v) if key == "terms" else _text(v, limits.text_chars))
                        for k, v in step[key].items()}
    return out


def _episode(episode: dict[str, Any], limits: ViewerLimits) -> dict[str, Any]:
    steps = episode.get("steps") or []
    return {
        "seed": _number(episode.get("seed")), "task": _text(episode.get("task"), limits.text_chars),
        "success": bool(episode.get("success")), "return": _number(episode.get("return")),
        "decisions": len(steps), "steps": [_step(s, limits) for s in steps[: limits.steps]],
    }


def viewer_groups(run: Path, limits: ViewerLimits = DEFAULT_LIMITS) -> list[dict[str, Any]]:
    """The viewer's episode list: ``[{"label": str, "episodes": [episode, ...]}, ...]``, the final
    evaluation's policies first, then training by iteration; empty groups are left out."""
    groups: list[dict[str, Any]] = [
        {"label": f"final evaluation: {policy}", "episodes": [_episode(e, limits) for e in episodes]}
        for policy, episodes in eval_sample(run / EVAL_TRANSCRIPTS_FILE, limits.eval_episodes).items()
    ]
    by_iteration: dict[str, list[dict[str, Any]]] = {}
    for episode in training_sample(run / TRANSCRIPTS_FILE, limits.train_episodes):
        by_iteration.setdefault(str(episode.get("iteration", "?")), []).append(_episode(episode, limits))
    groups += [{"label": f"training: iteration {it}", "episodes": eps} for it, eps in by_iteration.items()]
    return _within_budget([g for g in groups if g["episodes"]], limits.total_bytes)


def _within_budget(groups: list[dict[str, Any]], total_bytes: int) -> list[dict[str, Any]]:
    """The groups with episodes taken round-robin (one per group a round) while the JSON fits."""
    kept: list[list[dict[str, Any]]] = [[] for _ in groups]
    used, depth = 0, 0
    while any(depth < len(g["episodes"]) for g in groups):
        for index, group in enumerate(groups):
            if depth < len(group["episodes"]):
                size = len(json.dumps(group["episodes"][depth]))
                if used + size > total_bytes:
                    return _keep(groups, kept)
                used += size
                kept[index].append(group["episodes"][depth])
        depth += 1
    return _keep(groups, kept)


def _keep(groups: list[dict[str, Any]], kept: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"label": g["label"], "episodes": eps} for g, eps in zip(groups, kept) if eps]


def script_json(value: Any) -> str:
    """JSON that is safe inside ``<script>``: ``<``, ``>`` and ``&`` escaped as ``\\u003c`` etc., so
    no text can close the element or open a comment; ``JSON.parse`` reads it back unchanged."""
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return files("teamtr.telemetry").joinpath(name).read_text(encoding="utf-8")


def viewer_css() -> str:
    """The viewer's style sheet, for the page's ``<head>``."""
    return _asset("viewer.css")


def viewer_section(run: Path, limits: ViewerLimits = DEFAULT_LIMITS) -> str:
    """The viewer's HTML: its container, the episodes as JSON, and its script."""
    groups = viewer_groups(run, limits)
    if not groups:
        return f"<p>No {TRANSCRIPTS_FILE} or {EVAL_TRANSCRIPTS_FILE} in this run.</p>"
    return (
        "<div id='viewer'><noscript>The episode viewer needs JavaScript.</noscript></div>"
        f"<script type='application/json' id='viewer-data'>{script_json(groups)}</script>"
        f"<script>{_asset('viewer.js')}</script>"
    )
