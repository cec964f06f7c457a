"""Ctrl-C or SIGTERM during training: writes in flight finish first, then the run says how to go on.

``uninterrupted()`` holds a SIGINT or SIGTERM back while a checkpoint or a metrics line is written (they
are atomic against a kill, but an interrupt raised inside them would still cut a run mid-iteration's
bookkeeping) and delivers it right after. ``terminate_as_interrupt()`` (the CLI's) turns SIGTERM (a
`kill`, a scheduler's preemption, the end of a session) into ``Terminated``, a KeyboardInterrupt, so a
run stopped that way ends as after Ctrl-C; this matters for runs started in the background with
`nohup CMD &`, where the shell starts them with SIGINT ignored. ``resume_hint`` is what the trainer
prints before the interrupt reaches the CLI (which exits 130 after Ctrl-C, 143 after SIGTERM).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Iterator

from teamtr.train.checkpoint import latest_checkpoint


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by ``terminate_as_interrupt``'s handler."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises ``Terminated``; the previous handler is restored after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the block with SIGINT and SIGTERM deferred; one that came meanwhile is delivered on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set signal handlers; there Ctrl-C never lands anyway
        return
    caught: list[int] = []
    kinds = (signal.SIGINT, signal.SIGTERM)
    previous = {kind: signal.signal(kind, lambda signum, frame: caught.append(signum)) for kind in kinds}
    try:
        yield
    finally:
        for kind, handler in previous.items():
            signal.signal(kind, handler)
    if caught:
        # to the handler that was there: Python's raises KeyboardInterrupt, terminate_as_interrupt's
        # Terminated, SIGTERM's default ends the process (now that the write is complete)
        signal.raise_signal(caught[0])


def resume_hint(run_dir: Path) -> str:
    """Where the run's last complete checkpoint is and the command that continues from it."""
    ckpt = latest_checkpoint(run_dir)
    command = f"teamtr train --resume {run_dir}"
    if ckpt is None:
        return (f"interrupted before the first checkpoint of {run_dir}; `{command}` starts it over "
                "(or add --overwrite to the original command).")
    return f"interrupted: the last complete checkpoint is {ckpt}. To continue from it, run:\n  {command}"
