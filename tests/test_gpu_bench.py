"""benchmarks/gpu.sh runs end to end in its CPU check mode (a tiny shape) and writes every figure."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_script_quick_on_cpu_writes_every_figure(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run([str(ROOT / "benchmarks" / "gpu.sh"), "--device", "cpu", "--quick", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exact scoring (tiny)" in done.stdout and "end-to-end (tiny)" in done.stdout
    got = json.loads(out.read_text())
    score = got["scoring"]
    assert set(score["decisions_per_s"]) == {"exact", "naive", "generate", "ceiling"}
    assert all(v > 0 and math.isfinite(v) for v in score["decisions_per_s"].values())
    assert score["exact_over_naive"] > 1  # sharing the prompt over 12 candidates must beat 12 full passes
    assert got["update"]["tiny"]["samples_per_s"] > 0 and got["update"]["tiny"]["decisions"] == 8
    e2e = got["end_to_end"]["tiny"]
    assert e2e["iterations"] == 1 and e2e["decisions"] > 0 and e2e["decisions_per_s"] > 0
    assert got["machine"]["torch"]
