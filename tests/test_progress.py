"""Progress: plain lines in a log, rich bars on a terminal, every long phase named; Ctrl-C deferral."""

import io
import os
import re
import signal
from pathlib import Path

import pytest

from teamtr.telemetry.progress import Progress, iteration_stats, say
from teamtr.train.interrupt import Terminated, terminate_as_interrupt, uninterrupted

TINY = [
    "model.backbone=tiny-random", "rollout.episodes=4", "rollout.parallel=4", "train.iterations=1",
    "train.checkpoint_every=1", "train.final_eval_episodes=0", "algo.minibatch_size=8", "algo.epochs=2",
    "log.tensorboard=false", "env.max_steps=6",
]


def test_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress("iteration", 4, stream=stream, lines=None)
    assert progress.live is False
    line = progress.update(1, iteration_stats({"episode/success": 0.5, "episode/return": 1.25}))
    progress.close()
    assert line.startswith("iteration 1/4  success 0.50  return 1.250  eta ")
    assert stream.getvalue() == line + "\n"  # close does not repeat a step already printed


def test_plain_lines_are_spread_over_the_phase() -> None:
    stream = io.StringIO()
    with Progress("eval random", 100, unit="episodes", stream=stream, lines=4) as progress:
        for done in range(1, 101):
            progress.update(done)
    counts = [line.split()[2] for line in stream.getvalue().splitlines()]
    assert counts == ["25/100", "50/100", "75/100", "100/100"]
    stream = io.StringIO()
    with Progress("update", 8, unit="minibatch steps", stream=stream, lines=1) as progress:
        for _ in range(3):  # an early stop: the phase ends before its total
            progress.advance()
    assert stream.getvalue().startswith("update 3/8 minibatch steps  eta ")


def test_a_phase_of_unknown_length_says_when_it_starts_and_ends() -> None:
    stream = io.StringIO()
    with Progress("model load tiny-random", None, stream=stream, announce=True):
        pass
    lines = stream.getvalue().splitlines()
    assert lines[0] == "model load tiny-random ..." and lines[1].startswith("model load tiny-random done in ")
    assert len(lines) == 2


def test_eta_is_time_per_step_times_steps_left() -> None:
    progress = Progress("iteration", 10, start=2, stream=io.StringIO())
    progress._t0 -= 8.0  # 8 s spent on iterations 3..6
    assert progress.eta(2) is None
    assert progress.eta(6) == pytest.approx(8.0 / 4 * 4, rel=0.01)


def test_nested_phases_share_one_rich_display_on_a_terminal() -> None:
    stream = io.StringIO()
    with Progress("iteration", 5, stream=stream, live=True) as outer:
        with Progress("rollout", 3, unit="episodes", stream=stream, live=True) as inner:
            inner.update(3)
            say("eval at iteration 1: success 1.00")
        outer.update(5, "success 1.00")
    out = stream.getvalue()
    assert "rollout" in out and "3/3" in out and "5/5" in out and "success 1.00" in out
    assert "eval at iteration 1" in out and "\x1b[" in out  # ANSI: drawn, not plain


def test_uninterrupted_delivers_a_sigint_after_the_block() -> None:
    # Python's own Ctrl-C handler, even where the tests run as a background job (SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    finished = []
    with pytest.raises(KeyboardInterrupt):
        with uninterrupted():
            os.kill(os.getpid(), signal.SIGINT)
            finished.append(True)  # the write in flight completes
    assert finished == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_is_deferred_then_raised_as_terminated() -> None:
    before = signal.getsignal(signal.SIGTERM)
    finished = []
    with pytest.raises(Terminated):  # a KeyboardInterrupt: the trainer's Ctrl-C path handles it
        with terminate_as_interrupt():
            with uninterrupted():
                os.kill(os.getpid(), signal.SIGTERM)
                finished.append(True)  # the write in flight completes first
    assert finished == [True] and issubclass(Terminated, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) is before  # the process's own handler is back


def test_a_background_run_stops_on_sigterm_resumable(tmp_path: Path) -> None:
    """`nohup teamtr train ... &` starts with SIGINT ignored; `kill PID` (SIGTERM) stops it as Ctrl-C
    would: exit 143, the resume command printed, and `--resume` finishes the run."""
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    sets = [*TINY, "model.rl_layers=all", "train.iterations=50", f"run_dir={run}"]
    argv = [sys.executable, "-m", "teamtr.cli", "train", *sum((["--set", s] for s in sets), [])]
    ignore_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)  # noqa: E731 (as a shell's `&`)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ignore_sigint, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 300
    while not (run / "checkpoints" / "iter_000002").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # ignored, as in a background job
    time.sleep(1.0)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "teamtr train --resume" in err and "terminated (SIGTERM)" in err
    from teamtr.train.checkpoint import latest_checkpoint

    stopped = int(latest_checkpoint(run).name.split("_")[1])
    assert 2 <= stopped < 50
    from teamtr.cli import main

    assert main(["train", "--resume", str(run), "--set", f"train.iterations={stopped + 1}"]) == 0
    assert latest_checkpoint(run).name == f"iter_{stopped + 1:06d}"


def test_training_and_eval_name_every_phase_in_a_log(tmp_path: Path, capsys) -> None:
    from teamtr.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("{}\n")
    sets = [*TINY, "bc.enabled=true", "bc.demos=16", "bc.epochs=1", "bc.batch_size=8", "train.eval_every=1",
            "train.eval_episodes=2", "train.final_eval_episodes=2", "train.final_zero_shot_episodes=1",
            "algo.target_kl=1000", "algo.micro_batch_size=3", f"run_dir={tmp_path / 'run'}"]
    assert main(["train", "--config", str(cfg), *sum((["--set", s] for s in sets), [])]) == 0
    captured = capsys.readouterr()
    out = captured.err  # progress goes to stderr; stdout keeps the results
    assert "held-out seeds from" in captured.out and "rollout" not in captured.out
    for phase in ("model load tiny-random ...", "demo collection 16/16 decisions", "held-out demos 64/64 decisions",
                  "behaviour cloning 2/2 steps  loss ", "rollout 4/4 episodes", "update ",
                  "eval trained (heldout) 2/2 episodes", "eval before the first update: success ",
                  "eval at iteration 1: success ", "iteration 1/1  success ",
                  "eval random 2/2", "eval oracle 2/2"):
        assert phase in out, phase
    # the final table's coordinator rows (named by class until evaluate_table passes its labels)
    assert re.search(r"eval (merged|trained) 2/2 episodes", out) and re.search(r"eval zero-?shot 1/1 episodes", out)
    assert out.index("behaviour cloning") < out.index("rollout 4/4") < out.index("iteration 1/1")
    # the update counts decisions, a minibatch's micro-batches together: both epochs, every decision
    decisions = int(re.search(r"rollout 4/4 episodes\s+(\d+) decisions", out).group(1))
    done, total = map(int, re.search(r"update (\d+)/(\d+) decisions", out).groups())
    assert done == total == 2 * decisions
    assert main(["eval", "--policy", "random", "first", "--episodes", "3", "--set", "env.max_steps=6"]) == 0
    captured = capsys.readouterr()
    assert "eval random 3/3 episodes" in captured.err and "eval first 3/3 episodes" in captured.err
    assert captured.out.startswith("escape-room (")  # the table alone on stdout


def test_demonstrations_from_a_curriculum_stage_say_which_world(tmp_path: Path, capsys) -> None:
    """Cloning under a curriculum draws its demonstrations from the first stage's world (where RL starts)
    and its held-out ones from the task: the log names the stage's options, so neither is mistaken."""
    from teamtr.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("curriculum:\n  stages:\n    - {env: {agents: 2, items: 2}, success: 0.8, max_iterations: 1}\n")
    sets = [*TINY, "env.agents=3", "env.items=3", "bc.enabled=true", "bc.demos=16", "bc.epochs=1", "bc.batch_size=8",
            "train.iterations=0", f"run_dir={tmp_path / 'run'}"]
    assert main(["train", "--config", str(cfg), *sum((["--set", s] for s in sets), [])]) == 0
    err = capsys.readouterr().err
    assert "demo collection (curriculum stage 1: agents=2, items=2) 16/16 decisions" in err
    assert "held-out demos 64/64 decisions" in err
