"""The report's episode viewer in a real headless browser (Debian's ``chromium``): the page loads with no
console message, draws a decision with its probability bars, honours ``#episode=E&tick=T``, steps with
its buttons and arrow keys, and shows hostile texts as text. Skipped when chromium is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from teamtr.telemetry.report import write_report

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium; "
                                "CI's .ci/run installs it)")

HOSTILE = "</script><script>document.title='pwned'</script> <b>bold</b> & <!--"


def _step(tick: int, episode: str) -> dict:
    return {
        "tick": tick, "state": f"{episode} state at tick {tick} {HOSTILE}", "history": [f"{episode} earlier <i>x</i>"],
        "candidates": ["no new directive", f"agent_A: open door {tick}", "agent_B: wait"], "choice": 1,
        "directive": f"agent_A: open door {tick}", "reward": 0.5, "events": ["milestone"],
        "probs": [0.125, 0.625, 0.25], "terms": {"progress": 0.5}, "actions": {"agent_A": f"walk {tick}"},
    }


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    train = {"iteration": 4, "seed": 7, "task": "escape", "success": False, "return": -1.0,
             "steps": [_step(2 * t, "train") for t in range(4)]}
    no_probs = {**train, "iteration": 5, "steps": [{k: v for k, v in _step(0, "plain").items() if k != "probs"}]}
    held_out = {"policy": "trained", "seed": 100, "task": "escape", "success": True, "return": 2.0,
                "steps": [_step(2 * t, "eval") for t in range(3)]}
    (run / "transcripts.jsonl").write_text(json.dumps(train) + "\n" + json.dumps(no_probs) + "\n")
    (run / "eval_transcripts.jsonl").write_text(json.dumps(held_out) + "\n")
    write_report(run)
    return run / "report" / "index.html"


def _chromium(tmp_path: Path, url: str, *extra: str) -> tuple[str, str]:
    """(dumped DOM, stderr log) of ``url`` in a fresh profile."""
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", *extra, url],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return done.stdout, done.stderr


def _shown(dom: str) -> tuple[str, str, str]:
    """(header, state, position) as the viewer drew them."""
    meta = re.search(r'id="v-meta">([^<]*)<', dom)
    state = re.search(r'<pre class="v-state">([^<]*)<', dom)
    position = re.search(r'id="v-position">([^<]*)<', dom)
    assert meta and state and position, dom[-2000:]
    return meta.group(1), state.group(1), position.group(1)


def test_the_viewer_draws_the_first_decision_with_no_console_message(tmp_path: Path) -> None:
    index = _run(tmp_path)
    dom, log = _chromium(tmp_path, index.as_uri(), "--dump-dom")
    assert 'data-ok="1"' in dom
    assert [line for line in log.splitlines() if ":CONSOLE" in line] == []
    meta, state, position = _shown(dom)
    assert meta.startswith("final evaluation: trained · escape · seed 100 · success")  # eval episodes first
    assert state.startswith("eval state at tick 0 &lt;/script&gt;&lt;script&gt;document.title=")
    assert position == "decision 1 / 3 · tick 0"
    # Three bars, as wide as the probabilities, the chosen candidate marked.
    assert re.findall(r'class="v-fill" style="width: ([0-9.]+)%;"', dom) == ["12.5", "62.5", "25"]
    assert dom.count('class="v-cand v-chosen"') == 1 and "agent_A: open door 0" in dom
    # Hostile texts stay text: no injected element, no changed title.
    assert "<b>bold</b>" not in dom and "<i>x</i>" not in dom and "&lt;b&gt;bold&lt;/b&gt;" in dom
    assert dom.count("<script") == 2 and "<title>pwned" not in dom


def test_the_fragment_picks_the_episode_and_tick(tmp_path: Path) -> None:
    index = _run(tmp_path)
    dom, _ = _chromium(tmp_path, index.as_uri() + "#episode=1&tick=3", "--dump-dom")
    meta, state, position = _shown(dom)
    assert meta.startswith("training: iteration 4 · escape · seed 7 · failure")
    assert state.startswith("train state at tick 4 ")  # the first decision at tick >= 3
    assert position == "decision 3 / 4 · tick 4"
    dom, _ = _chromium(tmp_path, index.as_uri() + "#episode=2&step=0", "--dump-dom")
    assert _shown(dom)[1].startswith("plain state at tick 0")
    assert 'class="v-fill"' not in dom and 'class="v-cand v-chosen"' in dom  # no probs: a plain list


def test_buttons_and_arrow_keys_step(tmp_path: Path) -> None:
    index = _run(tmp_path)
    page = index.read_text(encoding="utf-8")
    driver = """<script>
      document.getElementById('v-next').click();
      document.getElementById('v-next').click();
      document.getElementById('v-next').click();  // past the last decision: stays there
      document.getElementById('v-prev').click();
      document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight'}));
      document.body.setAttribute('data-after-clicks', document.getElementById('v-position').textContent);
      document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowLeft'}));
      document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowLeft'}));
    </script></body>"""
    driven = index.with_name("driven.html")
    driven.write_text(page.replace("</body>", driver), encoding="utf-8")
    dom, log = _chromium(tmp_path, driven.as_uri(), "--dump-dom")
    assert [line for line in log.splitlines() if ":CONSOLE" in line] == []
    assert 'data-after-clicks="decision 3 / 3 · tick 4"' in dom
    _, state, position = _shown(dom)
    assert position == "decision 1 / 3 · tick 0" and state.startswith("eval state at tick 0")


def test_a_screenshot_is_drawn(tmp_path: Path) -> None:
    index = _run(tmp_path)
    shot = tmp_path / "viewer.png"
    _chromium(tmp_path, index.as_uri() + "#episode=0&step=1", f"--screenshot={shot}", "--window-size=1200,1400",
              "--hide-scrollbars")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
