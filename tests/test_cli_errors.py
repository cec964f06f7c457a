"""Every expected failure of every command: a non-zero exit, one or two lines that name what is wrong
and how to fix it, and never a traceback. Each case runs in-process, before any model is loaded."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from teamtr.cli import main

TINY = ["--set", "model.backbone=tiny-random", "--set", "log.tensorboard=false"]


def _files(tmp: Path) -> dict[str, Path]:
    """Bad inputs on disk: broken configs, a directory that is not a run, a run without checkpoints."""
    files = {
        "malformed": "seed: [1, 2\nenv: {name: escape-room}\n",
        "tabs": "env:\n\tname: escape-room\n",
        "list": "- seed\n- env\n",
        "binary": None,
    }
    out = {}
    for name, text in files.items():
        path = tmp / f"{name}.yaml"
        if text is None:
            path.write_bytes(b"\xff\xfe\x00garbage")
        else:
            path.write_text(text)
        out[name] = path
    (tmp / "notarun").mkdir()
    (tmp / "notarun" / "thesis.tex").write_text("keep me")
    out["notarun"] = tmp / "notarun"
    run = tmp / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.jsonl").write_text("")
    out["run"] = run
    torn = tmp / "torn" / "adapter"
    torn.mkdir(parents=True)
    (torn / "adapter_model.safetensors").write_bytes(b"\x00" * 7)
    (torn.parent / "coordinator.json").write_text('{"backbone": {"name": "tiny')
    out["torn"] = torn.parent
    return out


# (id, argv with {placeholders}, exit code, regex the message must match)
CASES = [
    ("yaml-malformed", ["train", "--config", "{malformed}"], 2, r"not valid YAML at line \d+, column \d+"),
    ("yaml-tabs", ["train", "--config", "{tabs}"], 2, r"not valid YAML.*spaces, never tabs"),
    ("yaml-not-mapping", ["train", "--config", "{list}"], 2, r"must hold a mapping of sections"),
    ("yaml-binary", ["config", "show", "{binary}"], 2, r"cannot be read|not valid YAML"),
    ("config-missing", ["train", "--config", "{tmp}/nope.yaml"], 2, r"neither a file nor a shipped config; shipped: default"),
    ("config-unknown-name", ["config", "show", "defualt"], 2, r"neither a file nor a shipped config"),
    ("set-no-equals", ["config", "show", "--set", "algo.clip_eps"], 2, r"not of the form key\.path=value"),
    ("set-bad-yaml", ["config", "show", "--set", "seed=[1"], 2, r"--set value .* is not valid YAML"),
    ("set-into-value", ["config", "show", "--set", "seed.x=1"], 2, r"'seed' is a value, not a section"),
    ("unknown-key", ["config", "show", "--set", "model.lr=1"], 2, r"unknown config key 'model\.lr'"),
    ("algo-unknown-key", ["config", "show", "--set", "algo.clip=0.1"], 2, r"algo.*clip"),
    ("algo-bad-name", ["config", "show", "--set", "algo.name=sac"], 2, r"algo\.name.*'ppo'"),
    ("algo-negative-lr", ["config", "show", "--set", "algo.lr=-1"], 2, r"algo.*lr"),
    ("reward-huge", ["config", "show", "--set", "rewards.weights.success=1e30"], 2, r"beyond \+-1000"),
    ("reward-nan", ["config", "show", "--set", "rewards.weights.success=.nan"], 2, r"rewards\.weights\.success.*finite"),
    ("temperature-tiny", ["config", "show", "--set", "policy.temperature=1e-40"], 2, r"policy\.temperature.*0\.001"),
    ("dtype-unknown", ["config", "show", "--set", "model.dtype=float8"], 2, r"model\.dtype.*'bfloat16'"),
    ("run-dir-empty", ["config", "show", "--set", "run_dir= "], 2, r"run_dir is empty"),
    ("curriculum-endless", ["config", "show", "--set", "curriculum.stages=[{env: {agents: 2}}]"], 2,
     r"needs `success` or `max_iterations`"),
    ("grpo-without-groups", ["config", "show", "--set", "algo.name=grpo"], 2, r"set rollout\.group_size to 2 or more"),
    ("micro-batches-with-trpo", ["config", "show", "--set", "algo.micro_batch_size=8", "--set", "algo.name=trpo"], 2,
     r"algo\.micro_batch_size=8 .* algo\.name=trpo .* remove it"),
    ("micro-batches-whole-team", ["config", "show", "--set", "algo.micro_batch_size=8", "--set",
                                  "team.directives=whole_team"], 2, r"team\.directives=whole_team \(token-level PPO\)"),
    ("groups-not-dividing", ["config", "show", "--set", "rollout.group_size=3"], 2, r"not a multiple of rollout\.group_size=3"),
    ("world-unknown", ["eval", "--env", "kitchen", "--episodes", "1"], 2, r"Unknown world 'kitchen'; known worlds: escape-room"),
    ("world-module-missing", ["eval", "--env", "no_such_module:World", "--episodes", "1"], 2, r"no_such_module"),
    ("world-option-unknown", ["eval", "--set", "env.players=3", "--episodes", "1"], 2, r"no option 'players'; allowed options"),
    ("world-option-not-int", ["eval", "--set", "env.agents=three", "--episodes", "1"], 2, r"agents='three' is not an integer"),
    ("world-option-range", ["eval", "--set", "env.agents=99", "--episodes", "1"], 2, r"agents=99 is out of range"),
    ("world-switch-keeps-old-options", ["eval", "--env", "software-team", "--set", "env.items=3", "--episodes", "1"], 2,
     r"'software-team' has no option 'items'"),
    ("episodes-zero", ["eval", "--episodes", "0"], 2, r"0 is not a positive number"),
    ("episodes-negative", ["eval", "--episodes", "-5"], 2, r"-5 is not a positive number"),
    ("episodes-word", ["eval", "--episodes", "many"], 2, r"'many' is not a whole number"),
    ("policy-unknown", ["eval", "--policy", "genius"], 2, r"invalid choice: 'genius'"),
    ("trained-without-checkpoint", ["eval", "--policy", "trained"], 2, r"--policy trained needs --checkpoint"),
    ("checkpoint-missing", ["eval", "--checkpoint", "{tmp}/nope"], 2, r"no checkpoint there"),
    ("checkpoint-torn", ["eval", "--checkpoint", "{torn}", *TINY], 2, r"coordinator\.json"),
    ("report-missing-dir", ["report", "{tmp}/nope"], 2, r"does not exist"),
    ("doctor-missing-dir", ["doctor", "{tmp}/nope"], 2, r"does not exist"),
    ("branch-missing-dir", ["branch", "{tmp}/nope", "--at", "1"], 2, r"does not exist"),
    ("branch-not-a-run", ["branch", "{notarun}", "--at", "1"], 2, r"not a run directory \(no config\.yaml\)"),
    ("branch-no-checkpoint", ["branch", "{run}", "--at", "4"], 2, r"no checkpoint of iteration 4 \(kept: none\)"),
    ("resume-not-a-run", ["train", "--resume", "{notarun}"], 2, r"not a run directory \(no config\.yaml\)"),
    ("train-over-a-run", ["train", *TINY, "--set", "run_dir={run}"], 2, r"already holds a run: --resume"),
    ("overwrite-not-a-run", ["train", *TINY, "--set", "run_dir={notarun}", "--overwrite"], 2,
     r"not a TeamTR run; nothing was deleted"),
    ("train-bad-world-option", ["train", *TINY, "--set", "env.items=9", "--set", "run_dir={tmp}/r1"], 2, r"items=9"),
    ("train-stage-of-another-world", ["train", "--config", "software_team_ppo", *TINY, "--set", "env.name=escape-room",
                                      "--set", "run_dir={tmp}/r3"], 2, r"curriculum\.stages\[0\]\.env: .*engineers"),
    ("play-unknown-world", ["play", "kitchen"], 2, r"Unknown world 'kitchen'"),
    ("command-unknown", ["fly"], 2, r"invalid choice: 'fly'"),
]
if importlib.util.find_spec("wandb") is None:
    CASES.append(("wandb-missing", ["train", *TINY, "--set", "log.wandb=true", "--set", "run_dir={tmp}/r2"], 2,
                  r"wandb is not installed: run pip install 'teamtr\[wandb\]'"))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_message_not_a_traceback(case, tmp_path, capsys, monkeypatch):
    _, argv, code, pattern = case
    monkeypatch.chdir(tmp_path)
    places = {k: str(v) for k, v in _files(tmp_path).items()} | {"tmp": str(tmp_path)}
    argv = [re.sub(r"\{(\w+)\}", lambda m: places.get(m[1], m[0]), a) for a in argv]
    try:
        got = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        got = exit_.code
    out, err = capsys.readouterr()
    assert got == code, (out, err)
    assert "Traceback" not in out + err
    assert re.search(pattern, err), err
    # One or two lines of message (argparse's usage lines aside), each starting with the program name.
    message = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
    assert 1 <= len(message) <= 2 and message[0].startswith("teamtr"), err


def test_the_table_is_large_enough():
    assert len(CASES) >= 25


def test_failed_checks_leave_no_run_directory(tmp_path, monkeypatch):
    """A check that fails before the model load must not leave a directory that blocks the retry."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY, "--set", "env.items=9", "--set", f"run_dir={tmp_path}/r"]) == 2
    assert not (tmp_path / "r").exists()


def test_overwrite_refusal_deletes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    places = _files(tmp_path)
    assert main(["train", *TINY, "--set", f"run_dir={places['notarun']}", "--overwrite"]) == 2
    assert (places["notarun"] / "thesis.tex").read_text() == "keep me"
    # An invalid config never deletes a run, even with --overwrite.
    assert main(["train", *TINY, "--set", f"run_dir={places['run']}", "--set", "algo.lr=-1", "--overwrite"]) == 2
    assert (places["run"] / "metrics.jsonl").exists()
