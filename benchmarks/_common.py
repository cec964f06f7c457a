"""Shared helpers of the policy benchmarks (``scoring.py``, ``update.py``).

Escape-room decisions from the real world, backbone loading (real or random-init weights of the same
shape), median timing, table printing and JSON output with the machine's description.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from teamtr.policy.backbone import Backbone, cpu_bf16_native, load_backbone
from teamtr.policy.prompts import Decision


def escape_decisions(n: int, candidates: int = 12, seed: int = 0, exact: bool = False) -> list[Decision]:
    """``n`` decisions of oracle-played escape-room episodes (real state texts: a ~75-token task,
    ~90-token state + history). Candidates are cut to ``candidates``: the first ``candidates - 1``
    directives and the no-op, each ~7 tokens + the end marker. ``exact``: skip the late states of an
    episode that have fewer candidates (items already carried), so every decision has ``candidates``."""
    from teamtr.envs import make
    from teamtr.team import Team

    team = Team(make("escape-room"))
    out: list[Decision] = []
    episode = seed
    while len(out) < n:
        state, done = team.reset(episode), False
        while not done and len(out) < n:
            texts = [c.text for c in state.candidates]
            if len(texts) > candidates:
                texts = texts[: candidates - 1] + texts[-1:]
            if len(texts) == candidates or not exact:
                out.append(Decision(state.task, state.state, tuple(state.history), tuple(texts)))
            state, _, done, _ = team.step(state.expert)
        episode += 1
    return out


def backbone(name: str, device: str, random_weights: bool = False, seed: int = 0) -> Backbone:
    """``load_backbone``; with ``random_weights`` the same architecture, randomly initialised (the
    same ``seed`` gives the same weights, so two loads score alike)."""
    bb = load_backbone(name, device=device)
    if not random_weights:
        return bb
    torch.manual_seed(seed)
    model = type(bb.model)(bb.model.config).to(device=bb.device, dtype=bb.dtype).eval()
    return dataclasses.replace(bb, model=model, source="random-init")


def sync(device: torch.device | str) -> None:
    """Wait for queued GPU work, so a timer measures it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: torch.device | str) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - start, result


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def machine() -> dict[str, Any]:
    """What the figures ran on: CPU/GPU, threads, load at the end of the run, code version."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=False).stdout.strip()
    except OSError:
        commit = ""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        # bf16 speed depends on it: AVX512-BF16/AMX run bf16 natively, AVX2 emulates it (~5x slower).
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_native": cpu_bf16_native(),
        "torch_threads": torch.get_num_threads(),
        "gpu": gpu,
        # Other jobs on a shared machine slow every figure; the load average says how much.
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "commit": commit,
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def machine_line() -> str:
    """One line to print above a table: what it was measured on."""
    m = machine()
    where = f"GPU {m['gpu']}" if m["gpu"] else f"CPU {m['cpu']} ({m['cpu_capability']}, bf16 native: {m['cpu_bf16_native']})"
    return f"[{where}, {m['torch_threads']} torch threads, torch {m['torch']}, load {m['loadavg']}, commit {m['commit']}]"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table; floats get 3 significant figures (2 decimals at most under 100)."""

    def cell(x: Any) -> str:
        if isinstance(x, float):
            return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"
        return str(x)

    cells = [[cell(x) for x in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
              for r in cells]
    return "\n".join(lines)


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` plus ``machine()`` to ``path`` (parents created); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    return out
