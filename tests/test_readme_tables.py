"""The README's result tables are generated from results/*.json (benchmarks/tables.py), not typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_tables_match_results() -> None:
    done = subprocess.run([sys.executable, "benchmarks/tables.py", "--check", "README.md"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (ROOT / "README.md").read_text().count("<!-- results: ") >= 1


def test_a_stale_table_is_caught(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    stale = text.replace("| 1.000 | 0.034 |", "| 1.000 | 0.035 |", 1)
    assert stale != text
    (tmp_path / "README.md").write_text(stale)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/tables.py"), "--check", str(tmp_path / "README.md")],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "stale" in done.stdout
