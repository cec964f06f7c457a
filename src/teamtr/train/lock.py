"""One trainer per run directory: an exclusive ``fcntl.flock`` on ``RUN/.lock``, held for the trainer's
life. The kernel drops it when the process dies, so a killed run never leaves a stale lock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from teamtr.core import TeamTRError

LOCK_NAME = ".lock"


class RunLock:
    """Hold ``run_dir``'s lock (``TeamTRError`` naming the holder's pid when another process, or
    another trainer in this one, holds it). ``release()`` is idempotent."""

    def __init__(self, run_dir: str | Path) -> None:
        self._fd: int | None = None  # set once the lock is held; __del__ runs even when __init__ raised
        self.path = Path(run_dir) / LOCK_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise TeamTRError(f"run directory {self.path.parent} is in use by another trainer (pid {holder}); "
                              "wait for it to end or stop it, or train into another run_dir.") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __del__(self) -> None:
        self.release()

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def lock_holder(run_dir: str | Path) -> int | None:
    """The pid of the process training in ``run_dir`` now, or ``None`` (no lock file, or nobody holds
    it). Probes with a shared non-blocking lock, released at once: it never blocks a trainer's start
    for longer than the probe."""
    path = Path(run_dir) / LOCK_NAME
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
