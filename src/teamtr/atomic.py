"""Files that survive crashes: atomic writes (a reader, or a resumed run, sees the old file or folder
or the new one, never half) and checked reads (a damaged file is an error naming it, not a traceback)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from teamtr.core import TeamTRError


@contextlib.contextmanager
def atomic_directory(final: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; on success it replaces ``final`` in one rename.

    Files are fsync'ed before the rename; on an exception the temporary folder is removed and
    ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_json(path: str | Path, what: str = "file") -> Any:
    """Parse a JSON file; a missing, unreadable or torn one raises ``TeamTRError`` naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TeamTRError(f"{path}: missing ({what}).") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TeamTRError(f"{path}: not valid JSON ({what}: {err}); the file is damaged.") from None


def read_safetensors(path: str | Path, device: str = "cpu", what: str = "tensors") -> dict[str, Any]:
    """Load a safetensors file; a missing, truncated or garbage one raises ``TeamTRError`` naming it."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise TeamTRError(f"{path}: missing ({what}).")
    try:
        return load_file(str(path), device=device)
    except Exception as err:  # safetensors raises its own error types, OSError or ValueError on damage
        raise TeamTRError(f"{path}: not a readable safetensors file ({what}: {type(err).__name__}: "
                          f"{str(err)[:120]}); the file is truncated or damaged.") from None


def write_json(path: str | Path, payload: Any) -> None:
    """``payload`` as indented JSON, written atomically."""
    atomic_write_text(path, json.dumps(payload, indent=2))
