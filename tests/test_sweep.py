"""``teamtr sweep``: one run per seed, resumable, and a mean ± std table over the seeds."""

from __future__ import annotations

import json
import shutil

from teamtr.cli import main

TINY = ["--set", "model.backbone=tiny-random", "--set", "log.tensorboard=false", "--set", "bc.enabled=false",
        "--set", "train.iterations=1", "--set", "algo.epochs=1", "--set", "rollout.episodes=2",
        "--set", "rollout.parallel=2", "--set", "train.final_eval_episodes=3",
        "--set", "train.final_zero_shot_episodes=1", "--set", "model.rl_layers=all", "--set", "env.items=2",
        "--set", "env.agents=2"]


def test_sweep_runs_each_seed_once_and_summarises(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "default", "--seeds", "0", "1", "--out", str(out), *TINY]
    assert main(argv) == 0
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["seeds"] == [0, 1] and "seed" not in summary["config"]
    finals = [json.loads((out / f"seed_{s}" / "final_eval.json").read_text())["rows"] for s in (0, 1)]
    oracle = summary["rows"]["oracle"]["success"]
    assert oracle["values"] == [f["oracle"]["success"] for f in finals] and oracle["mean"] == 1.0
    trained = summary["rows"]["trained"]["return"]
    mean = sum(f["trained"]["return"] for f in finals) / 2
    assert abs(trained["mean"] - mean) < 1e-9
    assert abs(trained["std"] - abs(finals[0]["trained"]["return"] - mean)) < 1e-9
    for seed in (0, 1):  # each run trained with its own seed
        assert f"seed: {seed}" in (out / f"seed_{seed}" / "config.yaml").read_text().splitlines()
    capsys.readouterr()

    # A finished sweep is not trained again; a seed whose run was killed before its table resumes.
    (out / "seed_1" / "final_eval.json").unlink()
    shutil.rmtree(out / "seed_1" / "report", ignore_errors=True)
    assert main([*argv, "--json", str(tmp_path / "results" / "st.json")]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "results" / "st.json").read_text())
    assert saved["config"]["env"] == {"name": "escape-room", "agents": 2, "items": 2}  # what the rows measured
    assert saved["command"].startswith("teamtr sweep default --seeds 0 1 --set model.backbone=tiny-random")
    assert "seed 0 done" in printed and "seed 1 -> " in printed and "(resuming)" in printed
    assert (out / "seed_1" / "final_eval.json").is_file()
    capsys.readouterr()

    # More train.iterations extends the finished runs from their last checkpoint, and redoes their tables.
    table = (out / "seed_0" / "final_eval.json").stat().st_mtime_ns
    assert main([*argv, "--set", "train.iterations=2"]) == 0
    printed = capsys.readouterr().out
    assert "seed 0 finished 1 iterations; extending it to 2" in printed and "(resuming)" in printed
    for seed in (0, 1):
        assert (out / f"seed_{seed}" / "checkpoints" / "iter_000002").is_dir()
        trained = [json.loads(line)["iteration"] for line in
                   (out / f"seed_{seed}" / "metrics.jsonl").read_text().splitlines()
                   if json.loads(line).get("kind") == "train"]
        assert trained == [1, 2]  # iteration 1 not trained twice
    assert (out / "seed_0" / "final_eval.json").stat().st_mtime_ns > table
    assert main([*argv, "--set", "train.iterations=2"]) == 0  # now done at 2: nothing trains
    assert "seed 0 done" in capsys.readouterr().out
    assert main([*argv[:3], "0", *argv[5:], "--set", "train.iterations=2"]) == 0  # one seed: its values
    printed = capsys.readouterr().out
    assert "1 seed (0): its final table" in printed and "success 1.000," in printed and " ± " not in printed

    # A finished run whose checkpoints are gone (pruned, or copied from results/ without them) counts as
    # done at its last training row, not trained again; asked for more iterations, it says why it cannot.
    shutil.rmtree(out / "seed_1" / "checkpoints")
    table = (out / "seed_1" / "final_eval.json").read_bytes()
    assert main([*argv, "--set", "train.iterations=2"]) == 0
    assert "seed 1 done" in capsys.readouterr().out and (out / "seed_1" / "final_eval.json").read_bytes() == table
    assert main([*argv, "--set", "train.iterations=3"]) == 2
    err = capsys.readouterr().err
    assert "seed 1 (" in err and "finished 2 iterations and keeps no checkpoint" in err and "extended to 3" in err
    assert not (out / "seed_1" / "checkpoints").exists()
    assert not (out / "seed_0" / "checkpoints" / "iter_000003").exists()  # refused before any seed trained


def test_parallel_sweep_trains_seeds_as_child_processes_like_the_serial_one(tmp_path, capsys):
    """--parallel 2: each seed a `teamtr train` child with its log beside its run; the runs and the
    summary match a serial sweep's; a seed whose child fails is named with its log, the others finish."""
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    assert main(["sweep", "default", "--seeds", "0", "1", "--out", str(serial), *TINY]) == 0
    assert main(["sweep", "default", "--seeds", "0", "1", "--out", str(parallel), "--parallel", "2", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "seed 0 finished" in printed and "seed 1 finished" in printed and " thread(s), log " in printed
    for seed in (0, 1):
        log = (parallel / f"seed_{seed}.log").read_text()
        assert "run directory:" in log and f"seed: {seed}" in (parallel / f"seed_{seed}" / "config.yaml").read_text()
        want = json.loads((serial / f"seed_{seed}" / "final_eval.json").read_text())["rows"]
        got = json.loads((parallel / f"seed_{seed}" / "final_eval.json").read_text())["rows"]
        assert got.keys() == want.keys()
        for policy in want:
            for metric, value in want[policy].items():
                assert abs(got[policy][metric] - value) < 1e-6, (policy, metric)
    assert json.loads((parallel / "sweep.json").read_text())["seeds"] == [0, 1]
    for seed in (0, 1):  # killed before their tables: both resume as children, with the same final tables
        (parallel / f"seed_{seed}" / "final_eval.json").unlink()
    assert main(["sweep", "default", "--seeds", "0", "1", "--out", str(parallel), "--parallel", "2", *TINY]) == 0
    assert capsys.readouterr().out.count("(resuming)") == 2
    for seed in (0, 1):
        want = json.loads((serial / f"seed_{seed}" / "final_eval.json").read_text())["rows"]
        got = json.loads((parallel / f"seed_{seed}" / "final_eval.json").read_text())["rows"]
        assert abs(got["trained"]["return"] - want["trained"]["return"]) < 1e-6

    broken = tmp_path / "broken"
    (broken / "seed_1").mkdir(parents=True)
    (broken / "seed_1" / "notes.txt").write_text("not a run")
    assert main(["sweep", "default", "--seeds", "0", "1", "--out", str(broken), "--parallel", "2", *TINY]) == 2
    err = capsys.readouterr().err
    assert "seed 1 failed, see" in err and "seed_1.log" in err and "seed 0" not in err
    assert (broken / "seed_0" / "final_eval.json").is_file()  # the other seed still finished
    assert "holds files that are not a TeamTR run" in (broken / "seed_1.log").read_text()


def test_grid_cells_cross_values_and_reject_bad_grids():
    import pytest

    from teamtr.core import TeamTRError
    from teamtr.train.sweep import grid_cells

    assert grid_cells([]) == [("", [])]
    assert grid_cells(["algo.name=pg,ppo", "algo.lr=3e-5,3e-4"]) == [
        ("name=pg_lr=3e-5", ["algo.name=pg", "algo.lr=3e-5"]), ("name=pg_lr=3e-4", ["algo.name=pg", "algo.lr=3e-4"]),
        ("name=ppo_lr=3e-5", ["algo.name=ppo", "algo.lr=3e-5"]), ("name=ppo_lr=3e-4", ["algo.name=ppo", "algo.lr=3e-4"])]
    # two keys ending alike keep their full names; a list value keeps its commas; / leaves the label
    assert [c for c, _ in grid_cells(["algo.lr=1e-3", "bc.lr=2e-3"])] == ["algo.lr=1e-3_bc.lr=2e-3"]
    assert grid_cells(["env.layout=[a,b],c", "model.init=runs/x/bc"]) == [
        ("layout=-a-b-_init=runs-x-bc", ["env.layout=[a,b]", "model.init=runs/x/bc"]),
        ("layout=c_init=runs-x-bc", ["env.layout=c", "model.init=runs/x/bc"])]
    for grid, sets, message in ((["algo.lr"], [], "write KEY=V1,V2"), (["algo.lr=1e-3,"], [], "no empty value"),
                                (["algo.lr=1,2", "algo.lr=3"], [], "given twice"),
                                (["algo.lr=1,1"], [], "listed twice"),
                                (["algo.lr=1,2"], ["algo.lr=3"], "both in --grid and in --set"),
                                (["seed=1,2"], [], "the sweep's own"), (["run_dir=a,b"], [], "the sweep's own"),
                                (["model.init=a/b,a-b"], [], "would both train in 'init=a-b'"),
                                (["algo.name=pg,PG"], [], "would both train in")):
        with pytest.raises(TeamTRError, match=message):
            grid_cells(grid, sets)


def test_grid_sweep_trains_every_cell_and_seed_and_resumes(tmp_path, capsys):
    """--grid: one directory per combination, a run per seed inside with that cell's settings, a
    sweep.json per cell and one for the grid; run again, it trains nothing; a bad grid value fails
    before any run starts."""
    out = tmp_path / "grid"
    argv = ["sweep", "default", "--seeds", "0", "1", "--grid", "algo.name=pg,ppo", "--out", str(out),
            "--parallel", "2", *TINY]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for name in ("pg", "ppo"):
        for seed in (0, 1):
            config = (out / f"name={name}" / f"seed_{seed}" / "config.yaml").read_text()
            assert f"  name: {name}" in config and f"seed: {seed}" in config.splitlines()
            assert f"name={name} seed {seed} finished" in printed
        cell = json.loads((out / f"name={name}" / "sweep.json").read_text())
        assert cell["cell"] == [f"algo.name={name}"] and cell["config"]["algo"]["name"] == name
        assert cell["seeds"] == [0, 1]
    grid = json.loads((out / "sweep.json").read_text())
    assert list(grid["cells"]) == ["name=pg", "name=ppo"] and grid["grid"] == ["algo.name=pg,ppo"]
    assert grid["command"].startswith("teamtr sweep default --seeds 0 1 --grid algo.name=pg,ppo --set ")
    assert f"teamtr report {out / 'name=pg'} --compare {out / 'name=ppo'}" in printed
    pg = [json.loads((out / "name=pg" / f"seed_{s}" / "final_eval.json").read_text())["rows"] for s in (0, 1)]
    assert grid["cells"]["name=pg"]["rows"]["trained"]["return"]["values"] == [r["trained"]["return"] for r in pg]

    assert main(argv) == 0  # everything done: nothing trains again
    assert capsys.readouterr().out.count(" done (") == 4
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("tables", Path(__file__).resolve().parent.parent / "benchmarks/tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    text = tables.sweep([str(out / "sweep.json")])  # the README block of a grid: one per cell
    assert text.count("cell `name=pg` (algo.name=pg) of `teamtr sweep default") == 1 and "cell `name=ppo`" in text
    assert text.count("| trained | ") == 2

    # a cell killed before its table resumes with its own settings (the run's config), serially too
    (out / "name=ppo" / "seed_1" / "final_eval.json").unlink()
    assert main([a for a in argv if a not in ("--parallel", "2")]) == 0
    printed = capsys.readouterr().out
    assert "name=ppo seed 1 -> " in printed and "(resuming)" in printed and printed.count(" done (") == 3
    assert "  name: ppo" in (out / "name=ppo" / "seed_1" / "config.yaml").read_text()

    # teamtr report on the grid's directory: one group per cell
    assert main(["report", str(out / "name=pg"), "--compare", str(out / "name=ppo"), "--out", str(tmp_path / "c1")]) == 0
    assert list(json.loads((tmp_path / "c1" / "compare.json").read_text())["groups"]) == ["name=pg", "name=ppo"]

    # a bad world option, grid value or warm start fails before any run starts
    for grid, message in ((["env.task_text=generic,genric"], "task_text='genric' is not allowed"),
                          (["algo.name=pg,nope"], "algo.name"),
                          (["model.init=" + str(tmp_path / "missing")], "model.init=")):
        assert main(["sweep", "default", "--seeds", "0", *(x for g in grid for x in ("--grid", g)),
                     "--out", str(tmp_path / "bad"), *TINY]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "bad").exists()
