"""write_report on synthetic run directories: PNGs written, HTML holds the tables, config and viewer data;
the viewer's episode sampling and its script-safe JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from teamtr.core import TeamTRError
from teamtr.telemetry.log import RunLogger
from teamtr.telemetry.report import PLOTS, PlotSpec, draw, latest_evals, write_report
from teamtr.telemetry.viewer import ViewerLimits, eval_sample, script_json, spread, training_sample, viewer_groups

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
    # Every training episode reaches the viewer's data, with "<" escaped so no text is markup.
    data = page.split("<script type='application/json' id='viewer-data'>", 1)[1].split("</script>", 1)[0]
    groups = json.loads(data)
    assert [g["label"] for g in groups] == ["training: iteration 3", "training: iteration 7", "training: iteration 9"]
    step = groups[1]["episodes"][0]["steps"][0]
    assert step["state"] == "key <in> room A" and step["choice"] == 1 and "<in>" not in data
    assert "target_kl: 0.02" in page  # the config, as text
    assert "No final_eval.json in this run" in page
    assert "<h2>Resumes</h2>" not in page  # never resumed
    # a resumed run's page says from where and what changed (config.yaml keeps only the latest value)
    (tmp_path / "resumes.jsonl").write_text(json.dumps({"iteration": 16, "time": "t", "changed": {
        "algo.lr": [0.001, 0.0003], "train.final_suite": ["heldout", "generalisation"]}}) + "\n")
    page = write_report(tmp_path).read_text()
    assert ("<tr><td>16</td><td>t</td><td>algo.lr: 0.001 -&gt; 0.0003; train.final_suite: &#x27;heldout&#x27; -&gt; "
            "&#x27;generalisation&#x27;</td></tr>") in page


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


def test_final_table_has_a_row_per_policy_and_the_shared_metrics_first(tmp_path: Path) -> None:
    rows = {"trained": {"success": 0.875, "return": 3.0, "events/soup": 1.5},
            "heuristic <b>": {"success": 1.0, "return": 4.25}}
    (tmp_path / "final_eval.json").write_text(json.dumps({"episodes": {"trained": 8}, "rows": rows}))
    page = write_report(tmp_path).read_text()
    assert "<tr><th>policy</th><th>success</th><th>return</th><th>events/soup</th></tr>" in page
    assert "<tr><td>trained</td><td>0.875</td><td>3.000</td><td>1.500</td></tr>" in page
    assert "<tr><td>heuristic &lt;b&gt;</td><td>1.000</td><td>4.250</td><td>&mdash;</td></tr>" in page
    (tmp_path / "final_eval.json").write_text('{"rows": ')
    assert "not valid JSON" in write_report(tmp_path).read_text()


def test_bc_plot_counts_steps_and_the_others_iterations() -> None:
    records = [{"kind": "bc", "iteration": i, "bc/loss": 1.0 / (i + 1)} for i in range(3)]
    records += [{"kind": "train", "iteration": i, "policy/entropy": 1.0} for i in range(3)]
    bc = draw(next(s for s in PLOTS if s.file == "bc.png"), records, None)
    entropy = draw(next(s for s in PLOTS if s.file == "entropy.png"), records, None)
    assert bc is not None and entropy is not None
    assert bc.axes[-1].get_xlabel() == "step" and entropy.axes[-1].get_xlabel() == "iteration"


def test_spread_keeps_the_first_and_last_and_is_even() -> None:
    assert spread(10, 4) == [0, 3, 6, 9]
    assert spread(3, 5) == [0, 1, 2]
    assert spread(10, 1) == [9] and spread(10, 0) == [] and spread(0, 3) == []


def _episodes(path: Path, episodes: list[dict]) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes) + "not json\n[1]\n")


def test_training_sample_spreads_over_the_run(tmp_path: Path) -> None:
    _episodes(tmp_path / "t.jsonl", [{"iteration": i, "steps": []} for i in range(10)])
    assert [e["iteration"] for e in training_sample(tmp_path / "t.jsonl", 4)] == [0, 3, 6, 9]
    assert training_sample(tmp_path / "missing.jsonl", 4) == []


def test_eval_sample_alternates_successes_and_failures_per_policy(tmp_path: Path) -> None:
    episodes = [{"policy": "trained", "seed": s, "success": s < 7, "steps": []} for s in range(10)]
    episodes += [{"policy": "random", "seed": 100 + s, "success": False, "steps": []} for s in range(3)]
    _episodes(tmp_path / "e.jsonl", episodes)
    sample = eval_sample(tmp_path / "e.jsonl", 5)
    assert list(sample) == ["trained", "random"]
    assert [e["seed"] for e in sample["trained"]] == [0, 7, 1, 8, 2]
    assert [e["seed"] for e in sample["random"]] == [100, 101, 102]


def _step(tick: int, text: str = "s") -> dict:
    return {"tick": tick, "state": text * 50, "history": [], "candidates": ["a", "b"], "choice": 0,
            "directive": "a", "reward": 0.5, "events": [], "probs": [0.75, 0.25], "terms": {"progress": 0.5}}


def test_viewer_groups_are_bounded_and_eval_comes_first(tmp_path: Path) -> None:
    _episodes(tmp_path / "transcripts.jsonl",
              [{"iteration": i, "seed": i, "success": False, "steps": [_step(t) for t in range(9)]} for i in range(6)])
    _episodes(tmp_path / "eval_transcripts.jsonl",
              [{"policy": "trained", "seed": 50 + i, "success": True, "steps": [_step(0, "e")]} for i in range(4)])
    limits = ViewerLimits(train_episodes=2, eval_episodes=3, steps=4, text_chars=20)
    groups = viewer_groups(tmp_path, limits)
    assert [g["label"] for g in groups] == ["final evaluation: trained", "training: iteration 0",
                                            "training: iteration 5"]
    assert [e["seed"] for e in groups[0]["episodes"]] == [50, 51, 52]
    train = groups[1]["episodes"][0]
    assert train["decisions"] == 9 and len(train["steps"]) == 4
    assert train["steps"][0]["state"] == "s" * 20 + " [... 30 more characters]"
    assert train["steps"][0]["probs"] == [0.75, 0.25] and train["steps"][0]["terms"] == {"progress": 0.5}
    # The byte budget takes one episode a group a round: the eval episodes are not crowded out.
    one, two = len(json.dumps(groups[0]["episodes"][0])), len(json.dumps(train))

    def kept(budget: int) -> list[int]:
        return [len(g["episodes"]) for g in viewer_groups(tmp_path, ViewerLimits(
            train_episodes=2, eval_episodes=3, steps=4, text_chars=20, total_bytes=budget))]

    assert kept(2 * one + 2 * two) == [2, 1, 1]
    assert kept(one + two) == [1, 1]


def test_script_json_cannot_close_the_script_and_reads_back() -> None:
    value = {"state": "</script><script>alert(1)</script> <!-- & \u2028"}
    text = script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == value


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


def test_eval_table_puts_the_worlds_headline_metric_after_success(tmp_path: Path) -> None:
    """An Overcooked run's periodic evaluation shows soups served beside success (its headline metric)."""
    (tmp_path / "config.yaml").write_text("env:\n  name: overcooked\n")
    with RunLogger(tmp_path, tensorboard=False) as logger:
        logger.log("eval", 2, {"suite": "heldout", "eval/success": 0.5, "eval/soups": 7.25, "eval/return": 145.0})
    page = write_report(tmp_path).read_text()
    assert "<th>success</th><th>soups</th><th>return</th>" in page
    assert "<tr><td>heldout</td><td>2</td><td>0.500</td><td>7.250</td><td>145.000</td>" in page


def test_a_headline_metric_with_its_spread_is_one_cell_in_the_report_and_the_card(tmp_path: Path) -> None:
    """``soups`` with ``soups_std`` (summarize's spread over episodes) reads mean ± std in one column."""
    from teamtr.policy.card import _results_table
    from teamtr.telemetry.report import _final_table

    rows = {"trained": {"success": 1.0, "soups": 1.5, "soups_std": 0.5}, "noop": {"success": 0.0, "soups": 1.0}}
    (tmp_path / "final_eval.json").write_text(json.dumps({"columns": ["success", "soups"], "rows": rows}))
    html_table = _final_table(tmp_path)
    assert "1.500 &plusmn; 0.500" in html_table and "soups_std" not in html_table and ">1.000<" in html_table
    card = "\n".join(_results_table(rows, {"trained": 10}))
    assert "| 1.500 ± 0.500 |" in card and "soups_std" not in card
