"""doctor: each symptom of the seed's table is flagged on a synthetic run that has it, and only then."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from teamtr.core import TeamTRError

from teamtr.telemetry.doctor import ConfigChange, count_drops, diagnose, format_findings
from teamtr.telemetry.log import RunLogger

CONFIG: dict[str, Any] = {
    "algo": {"clip_eps": 0.2, "lr": 3e-5, "target_kl": 0.02, "ent_coef_start": 0.05, "ent_coef_end": 0.01,
             "epochs": 4},
    "rollout": {"episodes": 16, "teams": 8},
    "train": {"iterations": 100},
}


def healthy(n: int = 40, seed: int = 0) -> list[dict[str, Any]]:
    """A run that learns: success 0.1 -> 0.95 with sampling noise, KL near target, fast enough."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        success = min(0.95, 0.1 + 1.2 * i / n) + rng.gauss(0, 0.04)
        records.append({
            "kind": "train", "iteration": i, "episode/success": success,
            "episode/return": 15 * success - 5 + rng.gauss(0, 0.3),
            "policy/kl_old_new": 0.012 + rng.gauss(0, 0.003), "policy/entropy": 1.6 - 1.0 * i / n,
            "optim/grad_norm": 0.8, "episode/repeat_rate": 0.1, "episode/invalid_rate": 0.03,
            "perf/decisions_per_s": 14.0 + rng.gauss(0, 1),
        })
    return records


def with_series(records: list[dict[str, Any]], key: str, values: list[float]) -> list[dict[str, Any]]:
    return [{**r, key: v} for r, v in zip(records, values)]


def codes(records: list[dict[str, Any]], config: dict[str, Any] | None = CONFIG) -> list[str]:
    return [f.code for f in diagnose(records, config)]


@pytest.mark.parametrize("seed", range(5))
def test_a_healthy_run_gives_no_findings(seed: int) -> None:
    assert diagnose(healthy(seed=seed), CONFIG) == []


def test_oscillating_return_is_flagged_with_its_numbers_and_the_keys_to_lower() -> None:
    rng = random.Random(1)
    swings = [5 + 4 * math.sin(2 * math.pi * i / 10) + rng.gauss(0, 0.2) for i in range(40)]
    findings = diagnose(with_series(healthy(), "episode/return", swings), CONFIG)
    assert [f.code for f in findings] == ["oscillating_reward"]
    finding = findings[0]
    assert finding.evidence["drops"] == 4  # one crash per 10-iteration cycle
    assert finding.evidence["return_range"] == pytest.approx(8 * 0.87, rel=0.1)  # 3-mean damps the sine by ~0.87
    assert finding.config_keys == ("algo.clip_eps", "algo.lr", "rollout.episodes")
    assert [(c.current, c.suggested) for c in finding.changes] == [(0.2, 0.1), (3e-5, 1.5e-5), (16, 32)]


def test_a_smooth_rise_and_a_noisy_rise_are_not_oscillation() -> None:
    smooth = [0.25 * i for i in range(40)]
    rng = random.Random(2)
    noisy = [0.25 * i + rng.gauss(0, 1.0) for i in range(40)]  # noise 10% of the range
    assert "oscillating_reward" not in codes(with_series(healthy(), "episode/return", smooth))
    assert "oscillating_reward" not in codes(with_series(healthy(), "episode/return", noisy))


def test_early_rise_then_plateau_is_flagged_and_a_late_rise_is_not() -> None:
    rng = random.Random(3)
    plateau = [min(0.5, 0.05 * i) + rng.gauss(0, 0.02) for i in range(40)]  # flat at 0.5 from iteration 10
    records = with_series(healthy(), "episode/success", plateau)
    records = with_series(records, "episode/return", [10 * s for s in plateau])
    findings = diagnose(records, CONFIG)
    assert [f.code for f in findings] == ["early_plateau"]
    evidence = findings[0].evidence
    assert evidence["plateau_success"] == pytest.approx(0.5, abs=0.03)
    assert evidence["rise_done_by_iteration"] <= 10
    assert abs(evidence["second_half_gain"]) < 0.1
    assert evidence["entropy_first"] == pytest.approx(1.6)
    assert str(findings[0].changes[1]) == "algo.ent_coef_end: raise 0.01 -> 0.02"
    still_rising = [0.015 * i for i in range(40)]  # 0 -> 0.6, not done
    assert "early_plateau" not in codes(with_series(healthy(), "episode/success", still_rising))


def test_kl_near_zero_is_flagged_and_dead_gradients_are_named() -> None:
    records = with_series(healthy(), "policy/kl_old_new", [2e-5] * 40)
    findings = diagnose(records, CONFIG)
    assert [f.code for f in findings] == ["kl_near_zero"]
    assert findings[0].evidence["median_kl_old_new"] == pytest.approx(2e-5)
    assert findings[0].changes[0] == ConfigChange("algo.clip_eps", "raise", 0.2, 0.3)
    dead = with_series(records, "optim/grad_norm", [0.0] * 40)
    assert diagnose(dead, CONFIG)[0].causes[0].startswith("no gradient reaches the adapter")


def test_kl_blowup_uses_the_configs_target() -> None:
    kl = [0.1 if i % 10 < 3 else 0.015 for i in range(40)]  # 5x target in 30% of iterations
    records = with_series(healthy(), "policy/kl_old_new", kl)
    findings = diagnose(records, CONFIG)
    assert [f.code for f in findings] == ["kl_blowup"]
    assert findings[0].evidence["share_over_limit"] == pytest.approx(0.3)
    assert findings[0].evidence["max_kl_old_new"] == pytest.approx(0.1)
    assert findings[0].changes[2] == ConfigChange("algo.epochs", "lower", 4, 2)
    loose = {**CONFIG, "algo": {**CONFIG["algo"], "target_kl": 0.1}}
    assert codes(records, loose) == []


def test_repeated_or_invalid_directives_are_judged_on_recent_iterations() -> None:
    repeats = [0.1] * 30 + [0.7] * 10
    findings = diagnose(with_series(healthy(), "episode/repeat_rate", repeats), CONFIG)
    assert [f.code for f in findings] == ["bad_directives"]
    assert findings[0].evidence == {"repeat_rate": pytest.approx(0.7), "repeat_rate_limit": 0.5}
    cured = [0.7] * 30 + [0.1] * 10
    assert codes(with_series(healthy(), "episode/repeat_rate", cured)) == []
    invalid = with_series(healthy(), "episode/invalid_rate", [0.25] * 40)
    assert diagnose(invalid, CONFIG)[0].evidence["invalid_rate"] == pytest.approx(0.25)


def test_directive_remedies_start_from_the_default_weights_and_fit_the_run() -> None:
    """A reward weight the run's config leaves out is its default (invalid -0.5), so the suggestion has
    numbers; a run without behaviour cloning is not told to weight its cloning by success."""
    invalid = with_series(healthy(), "episode/invalid_rate", [0.4] * 40)
    rl_alone = {**CONFIG, "rewards": {"weights": {"repeat": -1.0}}, "bc": {"enabled": False}}
    changes = {c.key: c for c in diagnose(invalid, rl_alone)[0].changes}
    assert changes["rewards.weights.invalid"] == ConfigChange("rewards.weights.invalid", "strengthen", -0.5, -1.0)
    assert changes["rewards.weights.repeat"] == ConfigChange("rewards.weights.repeat", "strengthen", -1.0, -2.0)
    assert "bc.success_weighted" not in changes
    cloned = {**rl_alone, "bc": {"enabled": True}}
    assert "bc.success_weighted" in {c.key for c in diagnose(invalid, cloned)[0].changes}


def test_slow_training_projects_the_run_time() -> None:
    records = with_series(healthy(), "perf/decisions_per_s", [0.5] * 40)
    records = with_series(records, "perf/iteration_s", [360.0] * 40)
    findings = diagnose(records, CONFIG)
    assert [f.code for f in findings] == ["slow_training"]
    assert findings[0].evidence["projected_hours"] == pytest.approx(10.0)  # 100 iterations x 6 min
    assert "update_share" not in findings[0].evidence  # a run logged before the split: no share
    assert "model.rl_layers" not in findings[0].config_keys


def test_slow_training_in_the_update_suggests_cheaper_updates() -> None:
    records = with_series(healthy(), "perf/decisions_per_s", [0.5] * 40)
    records = with_series(records, "perf/iteration_s", [300.0] * 40)
    records = with_series(records, "perf/update_s", [240.0] * 39 + [30.0])  # median share 0.8
    finding = diagnose(records, CONFIG)[0]
    assert finding.code == "slow_training" and "update" in finding.symptom
    assert finding.evidence["update_share"] == pytest.approx(0.8)
    assert {"algo.epochs", "model.rl_layers"} <= set(finding.config_keys)
    collect_bound = with_series(records, "perf/update_s", [60.0] * 40)  # share 0.2: the rollout's remedies
    assert "rollout.parallel" in diagnose(collect_bound, CONFIG)[0].config_keys


def test_fast_rollouts_with_slow_updates_are_still_slow_training() -> None:
    records = with_series(healthy(), "perf/decisions", [200] * 40)  # acting 14 decisions/s (healthy())...
    records = with_series(records, "perf/iteration_s", [300.0] * 40)  # ...but 0.67 a second overall
    older = diagnose(records, CONFIG)[0]  # a run logged before the split: slow, cause unknown
    assert older.code == "slow_training" and "update_share" not in older.evidence
    records = with_series(records, "perf/update_s", [285.0] * 40)
    finding = diagnose(records, CONFIG)[0]  # with it: 95% of every iteration in the update
    assert finding.code == "slow_training" and finding.evidence["update_share"] == pytest.approx(0.95)
    assert finding.evidence["median_iteration_decisions_per_s"] == pytest.approx(200 / 300)
    assert codes(with_series(records, "perf/iteration_s", [150.0] * 40)) == []  # 1.33 a second: fine


def test_update_remedies_stay_within_what_the_config_allows() -> None:
    records = with_series(healthy(), "perf/decisions_per_s", [0.5] * 40)
    records = with_series(records, "perf/iteration_s", [300.0] * 40)
    records = with_series(records, "perf/update_s", [240.0] * 40)
    hier = {**CONFIG, "algo": {**CONFIG["algo"], "epochs": 1}, "team": {"hierarchy": {"enabled": True}}}
    keys = diagnose(records, hier)[0].config_keys
    assert "model.rl_layers" not in keys and "algo.epochs" not in keys and "model.dtype" in keys
    top6 = {**CONFIG, "model": {"rl_layers": 6}}
    assert diagnose(records, top6)[0].config_keys[:1] == ("algo.epochs",)
    assert "model.rl_layers" not in diagnose(records, top6)[0].config_keys


def test_run_directory_reads_metrics_and_config_and_formats_flags(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("algo:\n  clip_eps: 0.3\n  lr: 0.0001\n  target_kl: 0.02\n")
    rng = random.Random(4)
    with RunLogger(tmp_path, tensorboard=False) as logger:
        for record in healthy():
            i = record["iteration"]
            record["episode/return"] = 5 + 4 * math.sin(2 * math.pi * i / 10) + rng.gauss(0, 0.2)
            logger.log("train", i, {k: v for k, v in record.items() if k not in ("kind", "iteration")})
    findings = diagnose(tmp_path)
    text = format_findings(findings, iterations=40)
    assert text.splitlines()[0] == "doctor: 1 finding in 40 training iterations"
    assert "algo.clip_eps: lower 0.3 -> 0.15" in text
    assert text.splitlines()[-1] == "   try: --set algo.clip_eps=0.15 --set algo.lr=5e-05"


def test_no_findings_and_missing_values_read_plainly() -> None:
    assert format_findings([], iterations=12) == "doctor: no problems found in 12 training iterations."
    assert str(ConfigChange("algo.lr", "lower")) == "algo.lr: lower"
    assert diagnose([], None) == []  # nothing logged yet: nothing to say
    with pytest.raises(TeamTRError, match="missing-run"):
        diagnose(Path("missing-run"))


def test_count_drops_counts_each_crash_once() -> None:
    assert count_drops([0, 5, 0, 5, 0], swing=3) == [2, 4]
    assert count_drops([5, 4, 3, 2, 1, 0], swing=2) == [2]  # one slow decline, one drop
    assert count_drops([0, 1, 2, 1, 2, 1], swing=2) == []


def test_oscillation_falls_back_to_success_when_no_return_is_logged() -> None:
    swings = [0.5 + 0.4 * math.sin(2 * math.pi * i / 10) for i in range(30)]
    records = [{"kind": "train", "iteration": i, "episode/success": s} for i, s in enumerate(swings)]
    findings = diagnose(records, None)
    assert [f.code for f in findings] == ["oscillating_reward"]
    assert findings[0].evidence["drops"] == 3 and "success_range" in findings[0].evidence


def test_huge_or_nan_weights_are_reported_and_never_doubled() -> None:
    config = {**CONFIG, "rewards": {"weights": {"invalid": -1e30, "repeat": float("nan"), "success": 5.0}}}
    repeats = [0.7] * 40
    findings = {f.code: f for f in diagnose(with_series(healthy(), "episode/repeat_rate", repeats), config)}
    assert set(findings) == {"bad_directives", "bad_reward_weights"}
    changes = {c.key: c for c in findings["bad_directives"].changes}
    assert changes["rewards.weights.invalid"].suggested is None  # not -2e30
    assert "leave it (already -1e+30" in str(changes["rewards.weights.invalid"])
    assert changes["rewards.weights.repeat"].suggested is None
    weights = findings["bad_reward_weights"]
    assert weights.config_keys == ("rewards.weights.invalid", "rewards.weights.repeat")
    ok = {**CONFIG, "rewards": {"weights": {"invalid": -2.0}}}
    assert {c.key: c.suggested for c in diagnose(with_series(healthy(), "episode/repeat_rate", repeats), ok)[0].changes
            }["rewards.weights.invalid"] == -4.0


def test_iterations_with_every_step_skipped_are_flagged() -> None:
    records = healthy()
    for r in records[-5:]:
        r.update({"optim/skipped_steps": 3.0, "optim/epochs_run": 0.0})
    findings = diagnose(records, CONFIG)
    assert [f.code for f in findings] == ["skipped_updates"]
    assert findings[0].evidence["iterations_all_skipped"] == 5
    records[-1]["optim/epochs_run"] = 0.5  # some steps were taken: not all skipped
    assert diagnose(records, CONFIG)[0].evidence["iterations_all_skipped"] == 4


def test_a_curriculum_stage_that_begins_at_a_decayed_lr_is_flagged_unless_stages_restart() -> None:
    def run(switch: int) -> list[dict[str, Any]]:  # one cosine over 40 iterations; stage 1 from `switch`
        lrs = [3e-4 * 0.5 * (1 + math.cos(math.pi * i / 40)) for i in range(40)]
        return [{**r, "optim/lr": lr, "curriculum/stage": int(i >= switch)}
                for i, (r, lr) in enumerate(zip(healthy(), lrs))]
    late = {f.code: f for f in diagnose(run(30), CONFIG)}
    assert set(late) == {"late_curriculum_stage"}
    finding = late["late_curriculum_stage"]
    assert finding.evidence["iteration"] == 30 and finding.evidence["lr_over_peak"] == pytest.approx(0.1464, abs=1e-3)
    assert "iter_000029" in " ".join(finding.remedies) and finding.config_keys == ("curriculum.schedule",)
    assert "try: --set curriculum.schedule=stage" in format_findings([finding])
    assert codes(run(10)) == []  # the stage began at 85% of the peak
    assert codes(run(30), {**CONFIG, "curriculum": {"schedule": "stage"}}) == []
    # a first stage with its own, larger lr: the drop at the switch is the configured one, not the schedule's
    chosen = [{**r, "optim/lr": r["optim/lr"] * (4 if r["curriculum/stage"] == 0 else 1)} for r in run(10)]
    staged = {**CONFIG, "algo": {**CONFIG.get("algo", {}), "lr": 3e-4},
              "curriculum": {"schedule": "run", "stages": [{"lr": 1.2e-3}]}}
    assert codes(chosen, staged) == []
    assert codes(chosen) == ["late_curriculum_stage"]  # without the stage's lr the same curve is a decayed start
    assert codes([{k: v for k, v in r.items() if k != "curriculum/stage"} for r in run(30)]) == []


def test_a_curriculum_is_judged_on_its_last_stage() -> None:
    """Success 0.1 -> 0.7 on an easy stage, then ~0.25 for 20 iterations on the real task: unlabelled, that
    reads as an early rise then a plateau; labelled, the last stage alone shows neither."""
    rng = random.Random(0)
    records = []
    for i, r in enumerate(healthy()):
        if i >= 20:
            success = 0.25 + rng.gauss(0, 0.04)
            r = {**r, "episode/success": success, "episode/return": 15 * success - 5 + rng.gauss(0, 0.3)}
        records.append(r)
    assert codes(records) == ["early_plateau"]
    assert codes([{**r, "curriculum/stage": int(i >= 20)} for i, r in enumerate(records)]) == []


CANDIDATES = ["product_manager: write the PRD", "architect: write the design", "engineer_1: implement the API module"]


def episodes(n_states: int, design_p: float = 0.0, design_chosen: bool = False) -> list[dict[str, Any]]:
    """Training transcripts in the trainer's format: 3 candidates a decision, the design step at
    ``design_p`` (0.0: below the 6 decimals transcripts keep), never chosen unless ``design_chosen``."""
    steps = [{"candidates": CANDIDATES, "probs": [0.4, design_p, 0.6 - design_p], "choice": 2 - (i % 2) * 2}
             for i in range(n_states)]
    if design_chosen:
        steps[-1]["choice"] = 1
    return [{"iteration": 1, "steps": steps[:n_states // 2]}, {"iteration": 2, "steps": steps[n_states // 2:]}]


def stalled(n: int = 8) -> list[dict[str, Any]]:
    """A run at success 0 with KL near the target and invalid directives kept rare (no other finding)."""
    return [{**r, "episode/success": 0.0, "episode/return": -5.0} for r in healthy(n)]


def test_a_directive_never_sampled_while_success_is_zero_is_flagged_with_the_temperature_to_raise(tmp_path: Path) -> None:
    config = {**CONFIG, "policy": {"temperature": 0.1}, "bc": {"enabled": False}}
    findings = diagnose(stalled(), config, transcripts=episodes(40))
    assert [f.code for f in findings] == ["unexplored_directives"]
    finding = findings[0]
    assert finding.evidence["directives"] == 1 and finding.evidence["recent_success"] == 0.0
    assert "'architect: write the design' (p < 1e-6 in 40 states)" in finding.causes[0]
    assert finding.config_keys == ("policy.temperature", "bc.enabled")
    assert "try: --set policy.temperature=1" in format_findings(findings)
    # read from a run directory's transcripts.jsonl, as `teamtr doctor RUN` does
    (tmp_path / "config.yaml").write_text("policy:\n  temperature: 0.5\n")
    with RunLogger(tmp_path, tensorboard=False) as logger:
        for record in stalled():
            logger.log("train", record["iteration"], {k: v for k, v in record.items() if k not in ("kind", "iteration")})
    (tmp_path / "transcripts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes(30, 2e-4)))
    found = {f.code: f for f in diagnose(tmp_path)}
    assert "(p <= 0.0002 in 30 states)" in found["unexplored_directives"].causes[0]
    assert str(found["unexplored_directives"].changes[0]) == "policy.temperature: raise 0.5 -> 1"


def test_unexplored_directives_need_a_failing_run_enough_states_and_no_sample() -> None:
    config = {**CONFIG, "policy": {"temperature": 1.0}}
    assert codes(stalled(), config) == []  # no transcripts
    assert codes(healthy(), config) == []
    assert [f.code for f in diagnose(healthy(), config, transcripts=episodes(40))] == []  # learned: success 0.95
    assert [f.code for f in diagnose(stalled(), config, transcripts=episodes(19))] == []  # too few states
    assert [f.code for f in diagnose(stalled(), config, transcripts=episodes(40, design_chosen=True))] == []
    assert [f.code for f in diagnose(stalled(), config, transcripts=episodes(40, 1e-3))] == []  # reached the floor
    finding = diagnose(stalled(), config, transcripts=episodes(40, 9e-4))[0]
    assert str(finding.changes[0]) == "policy.temperature: raise" and len(finding.changes) == 1  # at 1 already; bc on


def collapsing(best: float = 0.7) -> list[dict[str, Any]]:
    """9 iterations: success rises to ``best`` at iteration 6, then 0.0 at 7 and 8 (a crash)."""
    success = [best * x for x in (0.0, 0.1, 0.2, 0.3, 0.4, 0.7, 1.0)] + [0.0, 0.0]
    return [{**r, "episode/success": s, "episode/return": -14 + 20 * s, "episode/invalid_rate": 0.1}
            for r, s in zip(healthy(9), success)]


def directed(iteration: int, noops: int, steps: int = 10, success: bool = False, ret: float = -10.0) -> dict[str, Any]:
    """A training transcript of ``steps`` decisions, the first ``noops`` of them the no-op."""
    texts = ["no new directive"] * noops + ["engineer_1: implement the API module"] * (steps - noops)
    return {"iteration": iteration, "success": success, "return": ret,
            "steps": [{"directive": t, "candidates": [t], "choice": 0} for t in texts]}


def test_a_collapse_to_the_noop_is_flagged_with_its_shares_returns_and_the_checkpoint_to_go_back_to() -> None:
    config = {**CONFIG, "algo": {**CONFIG["algo"], "lr": 1e-3}}
    # before the fall: 2 of 10 decisions the no-op (failed tries return -16); after it: 9 and 10 of 10 (-6)
    episodes = [directed(it, 2, ret=-16.0) for it in range(1, 7)] + [directed(7, 9, ret=-6.0), directed(8, 10, ret=-6.5)]
    findings = diagnose(collapsing(), config, transcripts=episodes)
    assert [f.code for f in findings] == ["do_nothing_collapse"]
    evidence = findings[0].evidence
    assert (evidence["best_success"], evidence["best_iteration"], evidence["recent_success"]) == (0.7, 6.0, 0.0)
    assert evidence["noop_share_recent"] == pytest.approx(0.95) and evidence["noop_share_to_best"] == pytest.approx(0.2)
    assert evidence["return_failed_doing_nothing"] == pytest.approx(-6.25)
    assert evidence["return_failed_trying"] == pytest.approx(-16.0)
    assert "(see the two returns above)" in findings[0].causes[0]
    assert "checkpoints/iter_000005, the policy that sampled iteration 6" in findings[0].remedies[1]
    assert "`teamtr branch RUN --at 5`" in findings[0].remedies[1] and "--resume RUN-at5" in findings[0].remedies[1]
    assert [str(c) for c in findings[0].changes] == ["algo.lr: lower 0.001 -> 0.0003",
                                                     "rewards.weights.idle: strengthen -0.05 -> -0.2"]
    # an earlier curriculum stage's episodes (another world: longer, lower returns) are not compared
    staged = [{**r, "iteration": r["iteration"] + 1, "curriculum/stage": 1} for r in collapsing()]
    later = [{**e, "iteration": e["iteration"] + 1} for e in episodes]
    found = diagnose([{"kind": "train", "iteration": 0, "curriculum/stage": 0, "episode/success": 0.0}, *staged],
                     config, transcripts=[directed(0, 2, ret=-40.0), *later])
    assert [f.code for f in found] == ["do_nothing_collapse"]
    assert found[0].evidence["return_failed_trying"] == pytest.approx(-16.0)
    # the chosen candidate stands in for a transcript line without the directive text
    bare = [{**e, "steps": [{"candidates": s["candidates"], "choice": 0} for s in e["steps"]]} for e in episodes]
    assert [f.code for f in diagnose(collapsing(), config, transcripts=bare)] == ["do_nothing_collapse"]


def test_no_collapse_finding_without_a_fall_a_rise_of_the_noop_or_transcripts() -> None:
    before = [directed(it, 2) for it in range(1, 7)]
    assert codes(collapsing()) == []  # no transcripts: the no-op's share is unknown
    # success fell, but the policy still directs (another failure, not this one)
    assert [f.code for f in diagnose(collapsing(), CONFIG, transcripts=before + [directed(7, 3), directed(8, 2)])] == []
    # mostly the no-op from the start: doing nothing is how this policy plays (Overcooked's chefs' own rule)
    steady = [directed(it, 8) for it in range(1, 9)]
    assert [f.code for f in diagnose(collapsing(), CONFIG, transcripts=steady)] == []
    # the no-op rose, but success held at half its best or more
    held = [{**r, "episode/success": 0.4 if r["iteration"] >= 7 else r["episode/success"]} for r in collapsing()]
    noop = before + [directed(7, 9), directed(8, 10)]
    assert [f.code for f in diagnose(held, CONFIG, transcripts=noop)] == []
    assert [f.code for f in diagnose(collapsing(best=0.15), CONFIG, transcripts=noop)] == []  # never learned much
    # a curriculum's new stage: the fall is the harder task's, the collapse is read in the last stage only
    staged = [{**r, "curriculum/stage": int(r["iteration"] >= 7)} for r in collapsing()]
    assert [f.code for f in diagnose(staged, CONFIG, transcripts=noop)] == []


def test_beside_a_collapse_bad_directives_does_not_ask_for_harsher_penalties() -> None:
    invalid = [{**r, "episode/invalid_rate": 0.4} for r in collapsing()]
    episodes = [directed(it, 2) for it in range(1, 7)] + [directed(7, 9), directed(8, 10)]
    findings = {f.code: f for f in diagnose(invalid, CONFIG, transcripts=episodes)}
    assert set(findings) == {"bad_directives", "do_nothing_collapse"}
    assert findings["bad_directives"].config_keys == ("bc.success_weighted",)
    assert "not harsher penalties here" in findings["bad_directives"].remedies[-1]
    rl_alone = {**CONFIG, "bc": {"enabled": False}}  # nothing left to change: no empty config line
    text = format_findings(diagnose(invalid, rl_alone, transcripts=episodes))
    assert "rewards.weights.invalid" not in text and "config: \n" not in text and text.count("   config: ") == 1
    alone = {f.code: f for f in diagnose(invalid, CONFIG)}  # without the collapse: the usual advice
    assert alone["bad_directives"].config_keys[:2] == ("rewards.weights.invalid", "rewards.weights.repeat")
