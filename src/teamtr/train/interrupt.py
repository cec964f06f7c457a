"""Ctrl-C during training: writes in flight finish first, then the run says how to go on.

``uninterrupted()`` holds a SIGINT back while a checkpoint or a metrics line is written (they are atomic
against a kill, but a KeyboardInterrupt raised inside them would still cut a run mid-iteration's
bookkeeping) and delivers it right after. ``resume_hint`` is what the trainer prints before the
KeyboardInterrupt reaches the CLI (which exits 130).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Iterator

from teamtr.train.checkpoint import latest_checkpoint


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the block with SIGINT deferred; a SIGINT that came meanwhile is handled on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set signal handlers; there Ctrl-C never lands anyway
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        signal.raise_signal(signal.SIGINT)  # to the handler that was there: Python's raises KeyboardInterrupt


def resume_hint(run_dir: Path) -> str:
    """Where the run's last complete checkpoint is and the command that continues from it."""
    ckpt = latest_checkpoint(run_dir)
    command = f"teamtr train --resume {run_dir}"
    if ckpt is None:
        return (f"interrupted before the first checkpoint of {run_dir}; `{command}` starts it over "
                "(or add --overwrite to the original command).")
    return f"interrupted: the last complete checkpoint is {ckpt}. To continue from it, run:\n  {command}"
