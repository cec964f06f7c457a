"""`teamtr report --compare`: grouping, the table's numbers and the figures, on hand-written runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from teamtr.cli import main
from teamtr.core import TeamTRError
from teamtr.telemetry.compare import collapsed, group_runs, run_summary, summarise, worst_drop


def _run(path: Path, success: list[float], kl: float = 0.01, bc: bool = False, final: float | None = None,
         algo: str = "ppo", lr: float = 3e-5, seed: int = 0, trpo_delta: float | None = None) -> Path:
    path.mkdir(parents=True)
    lines = []
    if bc:
        lines.append({"kind": "bc", "iteration": 1, "bc/loss": 1.0, "perf/wall_time": 30.0})
    for i, s in enumerate(success, start=1):
        lines.append({"kind": "train", "iteration": i, "episode/success": s, "episode/return": 10 * s,
                      "policy/kl_old_new": kl * i, "perf/decisions": 100, "perf/iteration_s": 60.0})
    lines.append({"kind": "eval", "iteration": len(success), "suite": "heldout", "eval/success": success[-1]})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (path / "config.yaml").write_text(yaml.safe_dump({"bc": {"enabled": bc, "demos": 240}, "seed": seed,
                                                      "env": {"name": "escape-room", "agents": 3},
                                                      "algo": {"name": algo, "lr": lr, **(
                                                          {"trpo_delta": trpo_delta} if trpo_delta else {})}}))
    if final is not None:
        (path / "final_eval.json").write_text(json.dumps({"rows": {"trained": {"success": final, "return": 5.0}}}))
    return path


def test_worst_drop_and_collapse() -> None:
    assert worst_drop([0.1, 0.5, 0.2, 0.6, 0.55]) == pytest.approx(0.3)
    assert worst_drop([0.1, 0.2, 0.3]) == 0.0
    assert collapsed([0.2, 0.8, 0.3, 0.1])  # fell below 0.4 and stayed there
    assert not collapsed([0.2, 0.8, 0.3, 0.7])  # recovered above half its best
    assert not collapsed([0.2, 0.8])  # best is last: nothing after it
    assert not collapsed([0.0, 0.0])


def test_summary_counts_samples_and_time_until_threshold(tmp_path: Path) -> None:
    run = _run(tmp_path / "a", [0.2, 0.5, 0.95, 0.9], bc=True, final=0.97)
    s = run_summary(run, threshold=0.9)
    assert s["final"] == 0.97  # the end-of-run table wins over the last eval
    assert s["final_return"] == 5.0 and s["final_invalid_rate"] is None  # the table's trained row, as far as it goes
    assert s["best"] == 0.9  # best held-out evaluation (one eval line: the last)
    assert s["decisions_to_0.9"] == 240 + 300  # demos + three iterations of 100 decisions
    assert s["seconds_to_0.9"] == 30.0 + 180.0
    assert s["kl_per_update"] == pytest.approx(0.01 * 2.5)
    never = run_summary(_run(tmp_path / "b", [0.1, 0.2]), threshold=0.9)
    assert never["decisions_to_0.9"] is None and never["final"] == 0.2


def _evals(run: Path, evals: dict[int, float]) -> Path:
    """Held-out evaluations (iteration -> greedy success) added to a hand-written run."""
    with (run / "metrics.jsonl").open("a") as f:
        for it, value in evals.items():
            f.write(json.dumps({"kind": "eval", "iteration": it, "suite": "heldout", "eval/success": value}) + "\n")
    return run


def test_greedy_reach_reads_the_held_out_evaluations_and_the_warm_up_alone(tmp_path: Path) -> None:
    # PPO alone: sampled success reaches 0.9 at iteration 3; greedy evaluations at 0, 2 and 4 (0.3, _run's) reach it at 2
    alone = run_summary(_evals(_run(tmp_path / "a", [0.2, 0.5, 0.95, 0.3]), {0: 0.0, 2: 0.9}), threshold=0.9)
    assert alone["decisions_to_0.9"] == 300 and alone["greedy_decisions_to_0.9"] == 200
    assert alone["greedy_seconds_to_0.9"] == 120.0
    # with cloning: the clone alone (the evaluation at iteration 0) already wins: the demos are the samples
    warm = run_summary(_evals(_run(tmp_path / "b", [0.5, 0.6], bc=True), {0: 0.95}), threshold=0.9)
    assert warm["greedy_decisions_to_0.9"] == 240 and warm["greedy_seconds_to_0.9"] == 30.0
    # the evaluation before the first update is the warm start's: neither RL's best nor its final
    assert warm["best"] == 0.6 and warm["final"] == 0.6
    # a run never evaluated has no greedy reach at all (not "never"): the table shows "-"
    quiet = _run(tmp_path / "q", [0.95, 0.95])
    lines = (quiet / "metrics.jsonl").read_text().splitlines()
    (quiet / "metrics.jsonl").write_text("".join(x + "\n" for x in lines if '"eval"' not in x))
    assert "greedy_decisions_to_0.9" not in run_summary(quiet, threshold=0.9)
    table = summarise({"q": [quiet], "a": [tmp_path / "a"]}, threshold=0.9)
    assert "greedy_decisions_to_0.9" not in table["q"] and table["a"]["greedy_decisions_to_0.9"]["mean"] == 200
    never = run_summary(_run(tmp_path / "c", [0.2, 0.95]), threshold=0.99)
    assert never["greedy_decisions_to_0.99"] is None


def test_sweeps_group_by_directory_and_table_is_mean_std(tmp_path: Path) -> None:
    _run(tmp_path / "sweep-ppo" / "seed_0", [0.2, 1.0])
    _run(tmp_path / "sweep-ppo" / "seed_1", [0.4, 0.6])
    _run(tmp_path / "sweep-ppo" / "seed_1-at1", [0.4, 0.0])  # teamtr branch's copy, beside the seeds: not one
    _run(tmp_path / "pg", [0.9, 0.1, 0.1])
    groups = group_runs([tmp_path / "sweep-ppo", tmp_path / "pg"])
    assert {k: [p.name for p in v] for k, v in groups.items()} == {"sweep-ppo": ["seed_0", "seed_1"], "pg": ["pg"]}
    table = summarise(groups)
    assert table["sweep-ppo"]["final"]["mean"] == pytest.approx(0.8)
    assert table["sweep-ppo"]["final"]["std"] == pytest.approx(0.2)
    assert table["pg"]["collapsed"]["mean"] == 1.0 and table["sweep-ppo"]["collapsed"]["mean"] == 0.0
    with pytest.raises(TeamTRError, match="one label"):
        group_runs([tmp_path / "pg"], ["a", "b"])
    # a grid sweep's directory: one group per cell; cells of two grids named alike are not pooled silently
    for grid in ("g1", "g2"):
        _run(tmp_path / grid / "lr=1e-3" / "seed_0", [0.1, 0.2])
        _run(tmp_path / grid / "lr=1e-4" / "seed_0", [0.3, 0.4])
    assert {k: len(v) for k, v in group_runs([tmp_path / "g1"]).items()} == {"lr=1e-3": 1, "lr=1e-4": 1}
    with pytest.raises(TeamTRError, match="would both be labelled 'lr=1e-3'; give --label"):
        group_runs([tmp_path / "g1" / "lr=1e-3", tmp_path / "g2" / "lr=1e-3"])
    pooled = group_runs([tmp_path / "g1" / "lr=1e-3", tmp_path / "g2" / "lr=1e-3"], ["both", "both"])
    assert {k: len(v) for k, v in pooled.items()} == {"both": 2}  # pooled on purpose
    with pytest.raises(TeamTRError, match="is a grid sweep"):
        group_runs([tmp_path / "g1"], ["x"])
    with pytest.raises(TeamTRError, match="does not exist"):
        group_runs([tmp_path / "nope"])


def test_cli_writes_table_and_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path / "sweep-a" / "seed_0", [0.2, 1.0])
    _run(tmp_path / "sweep-a" / "seed_1", [0.4, 0.8], seed=1)
    _run(tmp_path / "b", [0.1, 0.3], algo="pg", lr=3e-4)
    _run(tmp_path / "t", [0.1, 0.2], algo="trpo", lr=3e-4, trpo_delta=0.02)
    _run(tmp_path / "t0", [0.1, 0.2], algo="trpo", lr=3e-4)  # config.yaml without the knob: its default
    out = tmp_path / "cmp"
    assert main(["report", str(tmp_path / "sweep-a"), "--compare", str(tmp_path / "b"), str(tmp_path / "t"),
                 str(tmp_path / "t0"), "--out", str(out)]) == 0
    saved = json.loads((out / "compare.json").read_text())
    assert saved["groups"]["sweep-a"]["final"]["mean"] == pytest.approx(0.9)
    assert "compare_success.png" in saved["figures"] and (out / "compare_success.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "| sweep-a (n=2) | 0.900 ± 0.100" in printed
    assert "| b (n=1) | 0.300 |" in printed  # one run: its value, not a spread of 0 it never measured
    # what each group ran, and the command, travel with the table into the README
    assert saved["command"] == (f"teamtr report {tmp_path / 'sweep-a'} --compare {tmp_path / 'b'} {tmp_path / 't'} "
                                f"{tmp_path / 't0'} --threshold 0.9 --out {out}")
    a, b = saved["groups"]["sweep-a"]["settings"], saved["groups"]["b"]["settings"]
    assert a["seeds"] == [0, 1] and a["algo.name"] == "ppo" and b["algo.name"] == "pg" and b["algo.lr"] == 3e-4
    assert a["env"] == {"name": "escape-room", "agents": 3}
    assert saved["groups"]["b"]["last_return"]["mean"] == pytest.approx(3.0)  # 10 x the last success, 0.3
    assert saved["groups"]["b"]["last_entropy"]["mean"] is None  # not logged by these runs: "-" in the table
    import importlib.util

    spec = importlib.util.spec_from_file_location("tables", Path(__file__).resolve().parent.parent / "benchmarks/tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    text = tables.compare([str(out / "compare.json")])  # the README block benchmarks/tables.py writes
    assert "escape-room (`agents=3`)" in text and f"`{saved['command']}`" in text
    assert "| sweep-a | ppo | 3e-05 | - | 0, 1 | 0.900 ± 0.100 |" in text
    # one seed: its value, no "± 0.000" spread it never measured
    assert "| b | pg | 0.0003 | - | 0 | 0.300 |" in text and "0.300 ± 0.000" not in text
    assert "| t | trpo | δ = 0.02 | - | 0 | 0.200 |" in text  # TRPO's step is its KL bound, not algo.lr
    assert "| t0 | trpo | δ = 0.01 | - | 0 | 0.200 |" in text
    # decisions until the training success first reached 0.9: sweep-a's seed 0 at iteration 2 (200), seed 1
    # never; the greedy columns (its held-out evaluation at iteration 2 read 1.0) too, with the seconds
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["runs"].endswith("| decisions to 0.9 | decisions to 0.9 greedy | seconds to 0.9 greedy |")
    assert rows["sweep-a"].endswith("| 200 (1 of 2 runs) | 200 (1 of 2 runs) | 120 (1 of 2 runs) |")
    assert rows["b"].endswith("| never | never | never |")
    # evaluated runs that never reached it say so; runs never evaluated (train.eval_every 0) get no greedy columns
    assert rows["b"].endswith("| never | never | never |")
    assert "to 0.9 greedy" not in tables.compare([_compare_file(tmp_path, [0.1, 0.95])])


def _compare_file(tmp_path: Path, success: list[float]) -> str:
    """Two runs without evaluation lines, compared."""
    runs = [_run(tmp_path / name, success) for name in ("low", "low2")]
    for run in runs:
        lines = (run / "metrics.jsonl").read_text().splitlines()
        (run / "metrics.jsonl").write_text("".join(x + "\n" for x in lines if '"eval"' not in x))
    out = tmp_path / "cmp-low"
    assert main(["report", str(runs[0]), "--out", str(out), "--compare", str(runs[1])]) == 0
    return str(out / "compare.json")


def test_the_table_names_noise_and_replay_where_a_group_set_them(tmp_path: Path) -> None:
    run = _run(tmp_path / "n", [0.5, 1.0])
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "policy": {"noise": 0.1},
                                                     "algo": {**config["algo"], "replay_coef": 0.5}}))
    settings = group_runs([run], ["n"])
    from teamtr.telemetry.compare import group_settings

    st = group_settings(settings["n"])
    assert st["policy.noise"] == 0.1 and st["algo.replay_coef"] == 0.5
    import importlib.util

    spec = importlib.util.spec_from_file_location("tables", Path(__file__).resolve().parent.parent / "benchmarks/tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    assert tables._extras(st) == "noise 0.1, replay 0.5"
    assert tables._extras(group_settings([_run(tmp_path / "plain", [0.5])])) == "-"  # replay_coef's default 0


def test_a_final_table_with_a_trained_row_per_layout_gives_their_mean(tmp_path: Path) -> None:
    run = _run(tmp_path / "oc", [0.2, 0.4])
    rows = {"trained @ layout=a": {"success": 1.0, "return": 9.0}, "trained @ layout=b": {"success": 0.0, "return": 3.0},
            "noop @ layout=a": {"success": 1.0, "return": 9.5}}
    (run / "final_eval.json").write_text(json.dumps({"rows": rows}))
    s = run_summary(run)
    assert s["final"] == 0.5 and s["final_return"] == 6.0
    # leave-one-layout-out: the unseen layout is a test beside the trained ones, not part of their mean
    rows["trained @ layout=c unseen"] = {"success": 0.0, "return": 0.0}
    (run / "final_eval.json").write_text(json.dumps({"rows": rows}))
    assert (run_summary(run)["final"], run_summary(run)["final_return"]) == (0.5, 6.0)
    # a generalisation suite: the held-out-seeds row, not the mean with one agent more and held-out names
    suite = {"trained @ heldout": {"success": 1.0, "return": 17.87}, "trained @ engineers=3": {"success": 1.0, "return": 14.39},
             "trained @ names=heldout": {"success": 0.565, "return": 9.18}}
    (run / "final_eval.json").write_text(json.dumps({"rows": suite}))
    assert (run_summary(run)["final"], run_summary(run)["final_return"]) == (1.0, 17.87)
