"""write_report on synthetic run directories: PNGs written, HTML holds eval table, config and transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from teamtr.core import TeamTRError

from teamtr.telemetry.log import RunLogger
from teamtr.telemetry.report import PLOTS, PlotSpec, draw, latest_evals, pick_transcript, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _full_run(run_dir: Path, iterations: int = 20) -> None:
    (run_dir / "config.yaml").parent.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text("algo:\n  name: ppo\n  target_kl: 0.02\n  clip_eps: 0.2\n")
    with RunLogger(run_dir, tensorboard=False) as logger:
        for step in range(3):
            logger.log("bc", step, {"bc/loss": 1.0 / (step + 1), "bc/accuracy": 0.3 * step})
        for it in range(iterations):
            logger.log("train", it, {
                "episode/return": it * 0.5, "episode/success": it / iterations, "episode/length": 30 - it,
                "episode/conflicts": 2.0, "episode/idle_rate": 0.1, "episode/comm_effectiveness": 0.8,
                "episode/invalid_rate": 0.05, "episode/repeat_rate": 0.1,
                "policy/kl_old_new": 0.015, "policy/kl_ref_new": 0.1 * it, "policy/entropy": 1.5 - it * 0.05,
                "policy/clip_frac": 0.1, "value/loss": 1.0 / (it + 1), "value/explained_variance": 0.5,
                "optim/grad_norm": 0.7, "optim/lr": 3e-5, "optim/ent_coef": 0.05, "optim/kl_coef": 0.1,
                "perf/decisions_per_s": 12.0, "perf/iteration_s": 30.0, "perf/wall_time": 30.0 * (it + 1),
            })
            if it % 5 == 4:
                logger.log("eval", it, {"suite": "heldout", "eval/success": it / 20, "eval/return": 1.0})
        logger.log("eval", iterations - 1, {"suite": "agents=4", "eval/success": 0.625, "eval/length": 17.0})
    episodes = [
        {"iteration": 3, "seed": 10, "success": False, "return": -1.0, "steps": []},
        {"iteration": 7, "seed": 11, "success": True, "return": 4.5, "steps": [
            {"tick": 0, "state": "key <in> room A", "candidates": ["no new directive", "agent_A: fetch the key"],
             "choice": 1, "directive": "agent_A: fetch the key", "reward": 0.5, "events": ["milestone"]},
        ]},
        {"iteration": 9, "seed": 12, "success": False, "return": -2.0, "steps": []},
    ]
    (run_dir / "transcripts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes) + '{"torn')


def test_full_run_writes_every_curve_and_an_html_page(tmp_path: Path) -> None:
    _full_run(tmp_path)
    index = write_report(tmp_path)
    assert index == tmp_path / "report" / "index.html"
    pngs = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert pngs == sorted(spec.file for spec in PLOTS)
    assert all((tmp_path / "report" / name).read_bytes()[:8] == PNG_MAGIC for name in pngs)
    page = index.read_text()
    for name in pngs:
        assert f'src="{name}"' in page
    # The last *successful* transcript, with the chosen candidate marked and the state escaped.
    assert "Sample transcript: iteration 7, seed 11, success, return 4.500, 1 decisions" in page
    assert "<b>agent_A: fetch the key &larr;</b>" in page and "key &lt;in&gt; room A" in page
    assert "target_kl: 0.02" in page  # the config, as text


def test_eval_table_shows_the_latest_line_of_each_suite(tmp_path: Path) -> None:
    _full_run(tmp_path)
    page = write_report(tmp_path).read_text()
    rows = latest_evals([json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()])
    assert [(r["suite"], r["iteration"], r["eval/success"]) for r in rows] == [
        ("agents=4", 19, 0.625), ("heldout", 19, 0.95),
    ]
    assert "<tr><td>heldout</td><td>19</td><td>0.950</td><td>1.000</td><td>&mdash;</td>" in page
    assert "<tr><td>agents=4</td><td>19</td><td>0.625</td><td>&mdash;</td><td>17.000</td>" in page


def test_kl_plot_draws_the_target_from_the_config_only_when_it_has_one() -> None:
    records = [{"kind": "train", "iteration": i, "policy/kl_old_new": 0.01 * i} for i in range(5)]
    spec = next(s for s in PLOTS if s.file == "kl_old_new.png")
    with_target = draw(spec, records, {"algo": {"target_kl": 0.02}})
    without = draw(spec, records, None)
    assert with_target is not None and without is not None
    labels = with_target.axes[0].get_legend_handles_labels()[1]
    assert "algo.target_kl = 0.02" in labels
    assert not any("target" in label for label in without.axes[0].get_legend_handles_labels()[1])
    line = with_target.axes[0].lines[0]
    assert list(line.get_ydata()) == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])


def test_partial_metrics_give_only_the_curves_they_can(tmp_path: Path) -> None:
    with RunLogger(tmp_path, tensorboard=False) as logger:
        for it in range(4):
            logger.log("train", it, {"episode/return": float(it), "policy/entropy": None})
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "entropy.png").write_bytes(b"stale")  # from an older report
    page = write_report(tmp_path).read_text()
    assert sorted(p.name for p in (tmp_path / "report").glob("*.png")) == ["return.png"]
    assert "No evaluation yet." in page and "No transcripts.jsonl" in page and "(no config.yaml)" in page


def test_panels_get_one_axis_per_present_metric() -> None:
    records = [
        {"kind": "train", "iteration": i, "episode/conflicts": 1.0, "episode/idle_rate": 0.2} for i in range(3)
    ]
    keys = ("episode/comm_effectiveness", "episode/conflicts", "episode/idle_rate")
    spec = PlotSpec("c.png", "c", keys, panels=True)
    figure = draw(spec, records, None)
    assert figure is not None and len(figure.axes) == 2
    assert draw(PlotSpec("x.png", "x", ("policy/entropy",)), records, None) is None


def test_pick_transcript_falls_back_to_the_last_episode(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"iteration": 1, "success": false}\n{"iteration": 2, "success": false}\n')
    assert pick_transcript(path) == {"iteration": 2, "success": False}
    assert pick_transcript(tmp_path / "none.jsonl") is None


def test_missing_run_dir_is_named(tmp_path: Path) -> None:
    with pytest.raises(TeamTRError, match="nope"):
        write_report(tmp_path / "nope")


def test_a_report_symlink_out_of_the_run_is_refused(tmp_path: Path) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.png").write_bytes(b"mine")
    _full_run(run)
    (run / "report").symlink_to(outside)
    with pytest.raises(TeamTRError, match=r"report is a symlink .*remove the link"):
        write_report(run)
    assert [p.name for p in outside.iterdir()] == ["keep.png"]  # nothing written or deleted there
    (run / "report").unlink()
    (run / "report").mkdir()
    (run / "report" / "index.html").symlink_to(outside / "keep.png")
    write_report(run)
    assert (outside / "keep.png").read_bytes() == b"mine" and not (run / "report" / "index.html").is_symlink()
