"""Console progress of long work: one ``Progress`` per phase (model load, demo collection, behaviour
cloning, iteration, rollout, update, evaluation).

Progress goes to stderr, as tqdm's does, so stdout carries only results (tables, paths) and
``teamtr eval ... > table.txt`` stays clean. On a terminal every open phase is a row of ONE shared rich
display, so nested phases (the rollout inside an iteration) show as stacked bars. When stderr is not a
terminal (a log file, CI) a phase prints plain lines instead: one per step when ``lines`` is None, else at most ``lines`` lines spread
over the phase (always its last step), so a log stays readable. Lines never need a terminal to parse:
``PHASE DONE/TOTAL UNIT  STATS  eta 1m05s``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

_display: Any = None  # the shared rich Progress while any live phase is open
_open_live = 0


def fmt_eta(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def iteration_stats(metrics: Mapping[str, Any], prefix: str = "episode/") -> str:
    """``success 0.50  return 1.250`` from a metrics line (keys ``PREFIX success``, ``PREFIX return``)."""
    parts = []
    for key, fmt in (("success", ".2f"), ("return", ".3f")):
        value = metrics.get(prefix + key)
        if isinstance(value, (int, float)):
            parts.append(f"{key} {float(value):{fmt}}")
    return "  ".join(parts)


def _live_display(stream: TextIO) -> Any:
    global _display
    if _display is None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        _display = RichProgress(TextColumn("{task.description}"), MofNCompleteColumn(), BarColumn(),
                                TextColumn("{task.fields[stats]}"), TextColumn("ETA"), TimeRemainingColumn(),
                                console=Console(file=stream, force_terminal=True))
        _display.start()
    return _display


def say(text: str, stream: TextIO | None = None) -> None:
    """Print a line of its own: above the bars while a live display runs, else to ``stream`` (stderr)."""
    if _display is not None:
        _display.console.print(text, highlight=False, markup=False)
        return
    out = stream if stream is not None else sys.stderr
    out.write(text + "\n")
    out.flush()


class Progress:
    """Progress of one phase of ``total`` steps (None: unknown, e.g. a model load).

    Args:
        phase: what is being done, first word of every line ("rollout", "eval trained").
        total: the step count the phase reaches; None for a phase of unknown length.
        unit: what a step is ("episodes", "steps"), shown after the count.
        start: steps already done (a resumed run), excluded from the ETA's rate.
        stream: where to write (default ``sys.stderr``).
        live: force the bar on or off; default: ``stream.isatty()``.
        lines: plain mode: at most this many lines over the phase; None: a line per step.
        announce: plain mode: also print a line when the phase starts (for long single steps).
    """

    def __init__(self, phase: str, total: int | None, *, unit: str = "", start: int = 0,
                 stream: TextIO | None = None, live: bool | None = None, lines: int | None = 10,
                 announce: bool = False) -> None:
        if total is not None and total < 0:
            raise ValueError(f"total={total!r}: expected >= 0 or None.")
        self.phase, self.total, self.unit, self.start = phase, total, unit, start
        self.stream = stream if stream is not None else sys.stderr
        self.live = _isatty(self.stream) if live is None else live
        self.done = start
        self._every = 1 if lines is None or not total else max(1, math.ceil(total / max(1, lines)))
        self._printed = start
        self._stats = ""
        self._t0 = time.monotonic()
        self._task: Any = None
        if self.live:
            global _open_live
            self._task = _live_display(self.stream).add_task(phase, total=total, completed=start, stats="")
            _open_live += 1
        elif announce:
            say(f"{phase} ..." if not unit else f"{phase} {unit} ...", self.stream)

    def eta(self, done: int) -> float | None:
        """Seconds left, from the mean time per step done in this session; None before any."""
        steps = done - self.start
        if steps <= 0 or self.total is None:
            return None
        return (time.monotonic() - self._t0) / steps * max(self.total - done, 0)

    def line(self) -> str:
        """The plain-text status line of the phase now."""
        count = f"{self.done}/{self.total if self.total is not None else '?'}"
        parts = [f"{self.phase} {count}" + (f" {self.unit}" if self.unit else "")]
        if self._stats:
            parts.append(self._stats)
        if self.total is not None and self.done < self.total:
            eta = self.eta(self.done)
            parts.append(f"eta {fmt_eta(eta) if eta is not None else '?'}")
        else:
            parts.append(f"{time.monotonic() - self._t0:.1f}s")
        return "  ".join(parts)

    def update(self, done: int, stats: str | None = None) -> str:
        """Show that ``done`` steps are done (``stats``: a short text after the count); return the line."""
        self.done = done
        if stats is not None:
            self._stats = stats
        text = self.line()
        if self._task is not None and _display is not None:
            _display.update(self._task, completed=done, stats=self._stats)
        elif not self.live and (done - self._printed >= self._every or done == self.total) and done > self._printed:
            self._printed = done
            say(text, self.stream)
        return text

    def advance(self, steps: int = 1, stats: str | None = None) -> str:
        return self.update(self.done + steps, stats)

    def close(self) -> None:
        """End the phase: its bar goes; in plain mode its last line is printed if it was not yet."""
        global _display, _open_live
        if self._task is not None:
            if _display is not None:
                _display.refresh()  # draw the phase's last state: the display redraws only ~10 times a second
                _display.remove_task(self._task)
                _open_live -= 1
                if _open_live <= 0:
                    _display.stop()
                    _display, _open_live = None, 0
            self._task = None
        elif not self.live and (self.done > self._printed or self.total is None):
            self._printed = self.done
            say(self.line() if self.total is not None else f"{self.phase} done in {time.monotonic() - self._t0:.1f}s",
                self.stream)
            self.total = self.total if self.total is not None else self.done  # closing twice prints once

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or file-like stream without isatty
        return False
