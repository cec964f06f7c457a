"""`teamtr doctor`: read a run's metrics and name the seed's troubleshooting symptoms (SEED section 6).

Each detector looks at the ``train`` lines (one per iteration) and fires on clear numeric thresholds,
all module constants below, so a reader can see why a finding was raised and tune the rule. A
finding carries the numbers it saw, the table's causes and remedies, and the config keys to change
with a suggested value when the run's config has the current one. A healthy run gives no finding.

Detectors (symptom: rule):

- oscillating reward: the smoothed return falls by a large swing (>= ``OSC_SWING_FRAC`` of its range
  and >= ``OSC_NOISE_MULT`` x the per-iteration noise) at least ``OSC_MIN_DROPS`` times, the last in
  the second half of the run (rise-and-crash cycles with no convergence).
- early rise then plateau: success rose by >= ``PLATEAU_MIN_RISE``, 80% of the rise came in the
  first ``PLATEAU_EARLY_FRAC`` of the run, the second half added < ``PLATEAU_MAX_LATE_GAIN`` and the
  level is below ``PLATEAU_SOLVED``.
  These two read a curriculum's last stage only: success falls when a stage ends because the task got
  harder.
- KL near 0: median KL(old||new) < ``KL_ZERO_FRAC`` x target_kl.
- KL blow-up: KL(old||new) > ``KL_BLOWUP_FACTOR`` x target_kl in >= ``KL_BLOWUP_MIN_SHARE`` of iterations.
- meaningless or repeated directives: over the last quarter, repeat rate >= ``REPEAT_RATE_MAX`` or
  invalid rate >= ``INVALID_RATE_MAX``.
- slow training: median decisions/s < ``SLOW_DECISIONS_PER_S``.
- skipped updates: an iteration whose every update step was skipped (non-finite loss or gradient).
- reward weights: a weight in the config that is NaN, infinite or above ``HUGE_WEIGHT`` in size
  (the doctor never suggests strengthening such a weight further).
- a curriculum stage that began late in the schedule: its first iteration's LR was below
  ``STAGE_LR_FRAC`` x the run's peak (one LR schedule over the run, ``curriculum.schedule: run``).
- directives never tried: in the run's training transcripts (``transcripts.jsonl``), a candidate shown
  in >= ``UNEXPLORED_MIN_STATES`` states was never chosen and its probability never reached
  ``UNEXPLORED_PROB``, while recent sampled success is below ``UNEXPLORED_SOLVED`` (a policy that has
  learned leaves wrong directives unsampled on purpose). If the task needs one of them, PPO cannot find
  it: it only reinforces what it samples.
- collapse to doing nothing: sampled success reached >= ``COLLAPSE_MIN_BEST`` and the last
  ``COLLAPSE_RECENT`` iterations fell below ``COLLAPSE_FRAC`` of that best, while in the training
  transcripts the no-op ("no new directive") took >= ``NOOP_SHARE_MIN`` of the recent decisions, at
  least ``NOOP_SHARE_RISE`` more than up to the best iteration (a curriculum's last stage only). The
  evidence adds the mean return of that stage's failed episodes (transcripts) that mostly did nothing
  and of those that tried: when the first is higher, the reward itself makes doing nothing the safer bet.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teamtr.config import default_reward_weight
from teamtr.core import NOOP
from teamtr.rl import AlgoConfig
from teamtr.telemetry.log import (TRANSCRIPTS_FILE, config_value, metric_series, read_config, read_metrics,
                                  require_run_dir)
from teamtr.telemetry.viewer import read_episodes

OSC_MIN_ITERATIONS = 8
OSC_SMOOTH = 3  # centred mean window: damps the sampling noise of a few episodes per iteration
OSC_SWING_FRAC = 0.3
OSC_NOISE_MULT = 3.0
OSC_MIN_DROPS = 2

PLATEAU_MIN_ITERATIONS = 10
PLATEAU_MIN_RISE = 0.1
PLATEAU_EARLY_FRAC = 0.5
PLATEAU_MAX_LATE_GAIN = 0.1
PLATEAU_SOLVED = 0.9

#: The default of ``algo.target_kl``, used when the run's config does not give one.
DEFAULT_TARGET_KL = AlgoConfig().target_kl
KL_MIN_ITERATIONS = 3
KL_ZERO_FRAC = 0.05
KL_BLOWUP_FACTOR = 2.0
KL_BLOWUP_MIN_SHARE = 0.25
GRAD_ZERO = 1e-8  # a median grad norm below this means no gradient reaches the trained weights

DIRECTIVE_MIN_ITERATIONS = 3
REPEAT_RATE_MAX = 0.5
INVALID_RATE_MAX = 0.2

SLOW_DECISIONS_PER_S = 2.0  # the rollout's decisions a second
SLOW_ITERATION_DECISIONS_PER_S = 1.0  # decisions an iteration over its seconds, the update included

#: A reward weight this large (in size) swamps every other term and overflows the returns' scale.
HUGE_WEIGHT = 1e3

STAGE_LR_FRAC = 0.5

UNEXPLORED_MIN_STATES = 20
UNEXPLORED_PROB = 1e-3
UNEXPLORED_SOLVED = 0.5
UNEXPLORED_SHOWN = 3  # the directives named in the finding, lowest probability first

COLLAPSE_MIN_BEST = 0.2
COLLAPSE_FRAC = 0.5
COLLAPSE_RECENT = 2
NOOP_SHARE_MIN = 0.5
NOOP_SHARE_RISE = 0.3


@dataclass(frozen=True)
class ConfigChange:
    """A config key to change: ``direction`` is ``lower`` or ``raise`` (or ``strengthen`` for a penalty
    weight: more negative); ``current``/``suggested`` are numbers when the run's config has the key, or
    the names of a choice (``curriculum.schedule``: run -> stage)."""

    key: str
    direction: str
    current: float | str | None = None
    suggested: float | str | None = None

    def __str__(self) -> str:
        if self.current is None or self.suggested is None:
            return f"{self.key}: {self.direction}"
        return f"{self.key}: {self.direction} {_value(self.current)} -> {_value(self.suggested)}"


def _value(v: float | str) -> str:
    return v if isinstance(v, str) else f"{v:g}"


@dataclass(frozen=True)
class Finding:
    """One symptom seen in a run, with the numbers behind it and what to try."""

    code: str  # short id, stable for scripts: "oscillating_reward"
    symptom: str  # the seed's words
    evidence: dict[str, float]
    causes: tuple[str, ...]
    remedies: tuple[str, ...]
    changes: tuple[ConfigChange, ...] = field(default_factory=tuple)

    @property
    def config_keys(self) -> tuple[str, ...]:
        return tuple(change.key for change in self.changes)


def _change(
    config: Mapping[str, Any] | None, key: str, direction: str, factor: float,
    low: float | None = None, high: float | None = None,
) -> ConfigChange:
    """A change of ``key`` by ``factor`` within ``[low, high]``, from the config's current value if known
    (a reward weight the config does not set is its default)."""
    current = config_value(config, key)
    if current is None and config is not None and key.startswith("rewards.weights."):
        current = default_reward_weight(key.rsplit(".", 1)[1])
    if not isinstance(current, (int, float)) or isinstance(current, bool):
        return ConfigChange(key, direction)
    if not math.isfinite(current) or (factor > 1 and abs(current) * factor > HUGE_WEIGHT and key.startswith("rewards.")):
        return ConfigChange(key, f"leave it (already {current:g}; see the reward-weights finding)")
    suggested = current * factor
    if low is not None:
        suggested = max(suggested, low)
    if high is not None:
        suggested = min(suggested, high)
    if isinstance(current, int):
        suggested = max(1, round(suggested)) if current >= 1 else round(suggested)
    return ConfigChange(key, direction, float(current), float(f"{suggested:.3g}"))


def rolling_mean(values: Sequence[float], window: int, centred: bool = True) -> list[float]:
    """Mean over ``window`` points around (``centred``) or ending at each point; shorter at the edges."""
    before = window // 2 if centred else window - 1
    after = window - 1 - before
    out = []
    for i in range(len(values)):
        part = values[max(0, i - before): i + after + 1]
        out.append(sum(part) / len(part))
    return out


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 when xs are all equal)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def _noise(values: Sequence[float]) -> float:
    """Per-iteration noise (std), robustly from first differences: a trend or slow swings barely move it.

    For white noise of std s the differences have std s*sqrt(2); their MAD*1.4826 estimates that.
    """
    diffs = [b - a for a, b in zip(values, values[1:])]
    centre = statistics.median(diffs)
    return 1.4826 * statistics.median(abs(d - centre) for d in diffs) / 2**0.5


def count_drops(values: Sequence[float], swing: float) -> list[int]:
    """Indices where a fall of at least ``swing`` from the preceding peak is confirmed (a zigzag).

    A rise of at least ``swing`` from a trough must come between two counted drops, so a single
    slow decline counts once, not once per step.
    """
    drops: list[int] = []
    rising: bool | None = None
    peak = trough = values[0]
    for i, v in enumerate(values):
        peak, trough = max(peak, v), min(trough, v)
        if rising is not False and peak - v >= swing:
            drops.append(i)
            rising, trough = False, v
        elif rising is not True and v - trough >= swing:
            rising, peak = True, v
    return drops


def _oscillation(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> Finding | None:
    key = "episode/return"
    iterations, ys = metric_series(records, key)
    if len(ys) < OSC_MIN_ITERATIONS:
        key = "episode/success"
        iterations, ys = metric_series(records, key)
    if len(ys) < OSC_MIN_ITERATIONS:
        return None
    smooth = rolling_mean(ys, OSC_SMOOTH)
    spread = max(smooth) - min(smooth)
    noise = _noise(ys)
    swing = max(OSC_SWING_FRAC * spread, OSC_NOISE_MULT * noise)
    if spread == 0 or swing > spread:
        return None
    drops = count_drops(smooth, swing)
    if len(drops) < OSC_MIN_DROPS or drops[-1] < len(ys) // 2:
        return None
    name = key.split("/")[1]  # evidence says which series it read: return, or success when return is missing
    return Finding(
        "oscillating_reward", "reward oscillates, no convergence",
        {"drops": len(drops), f"{name}_swing": swing, f"{name}_range": spread, f"{name}_noise": noise,
         "last_drop_iteration": iterations[drops[-1]]},
        ("clip_eps too large", "learning rate too high", "advantage estimate poor (no GAE, bad lambda)",
         "batch too small"),
        ("lower clip_eps first (0.2 -> 0.1)", "lower the learning rate", "keep GAE on (lambda 0.95)",
         "collect more episodes per iteration"),
        (_change(config, "algo.clip_eps", "lower", 0.5, low=0.05), _change(config, "algo.lr", "lower", 0.5),
         _change(config, "rollout.episodes", "raise", 2.0)),
    )


def _plateau(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> Finding | None:
    iterations, ys = metric_series(records, "episode/success")
    n = len(ys)
    if n < PLATEAU_MIN_ITERATIONS:
        return None
    start = statistics.fmean(ys[: max(2, n // 10)])
    level = statistics.fmean(ys[-max(2, n // 4):])
    rise = level - start
    if rise < PLATEAU_MIN_RISE or level >= PLATEAU_SOLVED:
        return None
    smooth = rolling_mean(ys, OSC_SMOOTH)
    reached = next(i for i, s in enumerate(smooth) if s >= start + 0.8 * rise)
    half = n // 2
    late_gain = _slope(iterations[half:], ys[half:]) * (iterations[-1] - iterations[half])
    if reached > PLATEAU_EARLY_FRAC * n or late_gain >= PLATEAU_MAX_LATE_GAIN:
        return None
    evidence = {"start_success": start, "plateau_success": level, "rise_done_by_iteration": iterations[reached],
                "second_half_gain": late_gain}
    _, entropy = metric_series(records, "policy/entropy")
    if len(entropy) >= 2 and entropy[0] > 0:
        evidence["entropy_first"], evidence["entropy_last"] = entropy[0], entropy[-1]
    return Finding(
        "early_plateau", "early rise then plateau", evidence,
        ("too little exploration", "entropy coefficient decays too fast", "task too hard for the current policy"),
        ("raise the entropy bonus and the floor of its decay", "add a little noise to directive choice "
         "(higher policy temperature)", "curriculum: start with easier worlds (fewer items, fewer agents)"),
        (_change(config, "algo.ent_coef_start", "raise", 1.5), _change(config, "algo.ent_coef_end", "raise", 2.0),
         _change(config, "policy.temperature", "raise", 1.25)),
    )


def _target_kl(config: Mapping[str, Any] | None) -> float:
    target = config_value(config, "algo.target_kl")
    return float(target) if isinstance(target, (int, float)) and target > 0 else DEFAULT_TARGET_KL


def _kl_findings(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> list[Finding]:
    _, kl = metric_series(records, "policy/kl_old_new")
    if len(kl) < KL_MIN_ITERATIONS:
        return []
    target = _target_kl(config)
    median = statistics.median(kl)
    findings = []
    if median < KL_ZERO_FRAC * target:
        evidence = {"median_kl_old_new": median, "target_kl": target}
        for key in ("optim/grad_norm", "policy/clip_frac", "optim/lr"):
            _, values = metric_series(records, key)
            if values:
                evidence["median_" + key.split("/")[1]] = statistics.median(values)
        dead = evidence.get("median_grad_norm", 1.0) < GRAD_ZERO
        findings.append(Finding(
            "kl_near_zero", "KL stays ~0: the policy barely moves",
            evidence,
            ("no gradient reaches the adapter (frozen layers, LoRA not attached, lr 0)" if dead else
             "broken or vanishing gradients (check LoRA targets and grad norms)", "clip_eps too small",
             "learning rate too low"),
            ("check gradient flow: optim/grad_norm must be > 0 and the LoRA layers trainable", "raise clip_eps",
             "raise the learning rate"),
            (_change(config, "algo.clip_eps", "raise", 1.5, high=0.3), _change(config, "algo.lr", "raise", 2.0),
             ConfigChange("model.train_layers", "check (all trains every layer)")),
        ))
    over = [v for v in kl if v > KL_BLOWUP_FACTOR * target]
    if len(over) >= KL_BLOWUP_MIN_SHARE * len(kl):
        findings.append(Finding(
            "kl_blowup", "KL(old||new) well above target_kl: updates leave the trust region",
            {"target_kl": target, "median_kl_old_new": median, "max_kl_old_new": max(kl),
             "share_over_limit": len(over) / len(kl)},
            ("learning rate too high", "clip_eps too large", "too many epochs per batch"),
            ("lower the learning rate", "lower clip_eps", "fewer epochs (early stop at 1.5 x target_kl helps)"),
            (_change(config, "algo.lr", "lower", 0.5), _change(config, "algo.clip_eps", "lower", 0.5, low=0.05),
             _change(config, "algo.epochs", "lower", 0.5)),
        ))
    return findings


def _directives(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> Finding | None:
    evidence: dict[str, float] = {}
    for key, limit in (("episode/repeat_rate", REPEAT_RATE_MAX), ("episode/invalid_rate", INVALID_RATE_MAX)):
        _, values = metric_series(records, key)
        if len(values) >= DIRECTIVE_MIN_ITERATIONS:
            recent = statistics.fmean(values[-max(DIRECTIVE_MIN_ITERATIONS, len(values) // 4):])
            if recent >= limit:
                evidence[key.split("/")[1]] = recent
                evidence[key.split("/")[1] + "_limit"] = limit
    if not evidence:
        return None
    return Finding(
        "bad_directives", "meaningless or repeated directives", evidence,
        ("the reward does not punish invalid or repeated directives", "action space too loose",
         "bad demonstrations"),
        ("penalise invalid and repeated directives", "use templated directives", "prioritised replay of "
         "successful trajectories in the behaviour-cloning warm-up"),
        (_change(config, "rewards.weights.invalid", "strengthen", 2.0),
         _change(config, "rewards.weights.repeat", "strengthen", 2.0),
         # replay of successes weights the cloning: only for a run that clones (bc.enabled unset: default on)
         *([ConfigChange("bc.success_weighted", "enable")] if config_value(config, "bc.enabled") is not False else [])),
    )


def _slow(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> Finding | None:
    """Slow rollouts (decisions a second while acting) or slow iterations (decisions over the whole
    iteration, the update included); where the update's share of the time is logged, its remedies
    when it is over half."""
    _, speed = metric_series(records, "perf/decisions_per_s")
    by_it = dict(zip(*metric_series(records, "perf/iteration_s")))
    seconds = [v for v in by_it.values() if v > 0]
    decided = dict(zip(*metric_series(records, "perf/decisions")))
    overall = [decided[i] / by_it[i] for i in decided if by_it.get(i, 0) > 0]
    slow_rollout = bool(speed) and statistics.median(speed) < SLOW_DECISIONS_PER_S
    slow_overall = bool(overall) and statistics.median(overall) < SLOW_ITERATION_DECISIONS_PER_S
    if not (slow_rollout or slow_overall):
        return None
    evidence = {"median_decisions_per_s": statistics.median(speed) if speed else float("nan"),
                "limit": SLOW_DECISIONS_PER_S}
    if overall:
        evidence["median_iteration_decisions_per_s"] = statistics.median(overall)
    total = config_value(config, "train.iterations")
    if seconds:
        evidence["median_iteration_s"] = statistics.median(seconds)
        if isinstance(total, int):
            evidence["projected_hours"] = evidence["median_iteration_s"] * total / 3600
    updates = dict(zip(*metric_series(records, "perf/update_s")))
    shares = [updates[i] / by_it[i] for i in updates if by_it.get(i, 0) > 0]
    if shares:  # runs logged since the split: which phase to make cheaper
        evidence["update_share"] = statistics.median(shares)
    if evidence.get("update_share", 0.0) > 0.5:
        return Finding(
            "slow_training", "training very slow (mostly in the update)", evidence,
            ("every update epoch re-runs the trained layers over each decision", "long prompts"),
            ("fewer update epochs", "train only the top layers over cached trunk activations",
             "micro-batches sized to the cache"), _update_changes(config))
    return Finding(
        "slow_training", "training very slow", evidence,
        ("environment or LLM inference bound", "long prompts (history, state text)"),
        ("more parallel teams stepped as one batch", "batched scoring", "cap history and directive length",
         "a smaller base model first"),
        (_change(config, "rollout.parallel", "raise", 2.0), ConfigChange("model.backbone", "smaller"),
         ConfigChange("model.dtype", "bfloat16 on a GPU or on a CPU with AVX512-BF16/AMX")),
    )


def _update_changes(config: Mapping[str, Any] | None) -> tuple[ConfigChange, ...]:
    """A cheaper update, as far as the run's config allows it: fewer epochs (not below 1, not for
    TRPO, whose step is one), fewer trained layers (not in a hierarchical run: one adapter per level
    needs them all; not when already 6 or fewer)."""
    out = []
    epochs = config_value(config, "algo.epochs")
    if config_value(config, "algo.name") != "trpo" and not (isinstance(epochs, int) and epochs <= 1):
        out.append(_change(config, "algo.epochs", "lower", 0.5))
    layers = config_value(config, "model.rl_layers")
    if not config_value(config, "team.hierarchy.enabled") and not (isinstance(layers, int) and layers <= 6):
        out.append(ConfigChange("model.rl_layers", "lower (e.g. 6)"))
    out.append(ConfigChange("model.dtype", "bfloat16 on a GPU or on a CPU with AVX512-BF16/AMX"))
    return tuple(out)


def all_steps_skipped(metrics: Mapping[str, Any]) -> bool:
    """True when an update skipped steps and took none: PPO/PG ran no epoch; TRPO kept the old policy."""
    skipped = metrics.get("optim/skipped_steps")
    if not isinstance(skipped, (int, float)) or not skipped > 0:
        return False
    return metrics.get("optim/epochs_run") == 0 or metrics.get("trpo/accepted") == 0


def _skipped(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> Finding | None:
    train = [r for r in records if r.get("kind") == "train"]
    bad = [int(r["iteration"]) for r in train if all_steps_skipped(r)]
    if not bad:
        return None
    return Finding(
        "skipped_updates", "update steps skipped (non-finite loss or gradient)",
        {"iterations_all_skipped": float(len(bad)), "iterations": float(len(train)), "last": float(bad[-1])},
        ("reward weights so large the returns overflow", "policy.temperature so small the scores overflow",
         "a learning rate so large the weights diverged"),
        ("bring reward weights to the scale of 1-10", "keep policy.temperature near 1", "lower algo.lr"),
        (_change(config, "algo.lr", "lower", 0.1), ConfigChange("policy.temperature", "raise towards 1")),
    )


def _weights(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> Finding | None:
    weights = config_value(config, "rewards.weights")
    if not isinstance(weights, Mapping):
        return None
    bad = {k: float(v) for k, v in weights.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
           and (not math.isfinite(v) or abs(v) > HUGE_WEIGHT)}
    if not bad:
        return None
    return Finding(
        "bad_reward_weights", "non-finite or huge reward weights", {**bad, "limit": HUGE_WEIGHT},
        ("a typo in a weight (1e30 for 1e3, NaN)", "one term scaled to dominate all others"),
        ("give every reward weight a finite value of size <= 1e3 (1-10 is typical)",),
        tuple(ConfigChange(f"rewards.weights.{k}", "lower to a finite value of size <= 1e3") for k in bad),
    )


def _stage_lr_scale(config: Mapping[str, Any] | None, stage: Any) -> float:
    """A curriculum stage's ``lr`` over ``algo.lr`` (1 for the configured world or a stage without one)."""
    stages, base = config_value(config, "curriculum.stages"), config_value(config, "algo.lr")
    if not isinstance(stage, int) or not isinstance(stages, list) or not 0 <= stage < len(stages):
        return 1.0
    lr = stages[stage].get("lr") if isinstance(stages[stage], Mapping) else None
    return float(lr) / float(base) if isinstance(lr, (int, float)) and isinstance(base, (int, float)) and base > 0 else 1.0


def _late_stage(records: list[dict[str, Any]], config: Mapping[str, Any] | None) -> Finding | None:
    """The first curriculum stage (after the first) whose first iteration trained at a decayed LR (not
    with ``curriculum.schedule: stage``, whose stages start with their own warmup)."""
    if config_value(config, "curriculum.schedule") == "stage":
        return None
    train = [r for r in records if r.get("kind") == "train" and isinstance(r.get("optim/lr"), (int, float))]
    peak, stage = 0.0, None
    for r in train:
        # a stage's own lr (curriculum.stages[i].lr) is chosen, not decayed: compare the schedule's part alone
        lr, now = float(r["optim/lr"]) / _stage_lr_scale(config, r.get("curriculum/stage")), r.get("curriculum/stage")
        if stage is not None and now != stage and peak > 0 and lr < STAGE_LR_FRAC * peak:
            return Finding(
                "late_curriculum_stage", "a curriculum stage began at a decayed learning rate",
                {"stage": float(now), "iteration": float(r["iteration"]), "lr": lr, "lr_over_peak": lr / peak},
                ("one LR warmup + cosine spans the whole run (curriculum.schedule: run), so a stage that "
                 "begins late gets what is left of it",),
                ("start the schedules again at every stage (curriculum.schedule=stage)",
                 "or continue from the checkpoint the stage began at as a new run (model.init=RUN/checkpoints/"
                 f"iter_{int(r['iteration']) - 1:06d}), whose schedule spans its own iterations"),
                (ConfigChange("curriculum.schedule", "set", "run", "stage"),))
        peak, stage = max(peak, lr), now
    return None


def unexplored_directives(episodes: Iterable[Mapping[str, Any]]) -> list[tuple[str, int, float]]:
    """``(text, states shown, highest probability)`` of each candidate shown in at least
    ``UNEXPLORED_MIN_STATES`` recorded decisions, never chosen, and never given ``UNEXPLORED_PROB``;
    lowest probability first. Steps without ``probs`` (or with a list of another length) are skipped."""
    shown: dict[str, int] = {}
    top: dict[str, float] = {}
    chosen: set[str] = set()
    for episode in episodes:
        for step in episode.get("steps", []):
            candidates, probs = step.get("candidates"), step.get("probs")
            if not isinstance(candidates, list) or not isinstance(probs, list) or len(probs) != len(candidates):
                continue
            choice = step.get("choice")
            if isinstance(choice, int) and 0 <= choice < len(candidates):
                chosen.add(str(candidates[choice]))
            for text, p in zip(candidates, probs):
                if isinstance(p, (int, float)) and math.isfinite(p):
                    text = str(text)
                    shown[text] = shown.get(text, 0) + 1
                    top[text] = max(top.get(text, 0.0), float(p))
    never = [(text, n, top[text]) for text, n in shown.items()
             if n >= UNEXPLORED_MIN_STATES and text not in chosen and top[text] < UNEXPLORED_PROB]
    return sorted(never, key=lambda row: (row[2], row[0]))


def _at_most(p: float) -> str:
    """A highest probability as words: transcripts round probabilities to 6 decimals."""
    return "p < 1e-6" if p == 0 else f"p <= {p:.1g}"


def _unexplored(records: list[dict[str, Any]], config: Mapping[str, Any] | None,
                episodes: Iterable[Mapping[str, Any]]) -> Finding | None:
    _, success = metric_series(records, "episode/success")
    recent = statistics.fmean(success[-max(1, len(success) // 4):]) if success else None
    if recent is not None and recent >= UNEXPLORED_SOLVED:
        return None
    never = unexplored_directives(episodes)
    if not never:
        return None
    named = "; ".join(f"{text!r} ({_at_most(p)} in {n} states)" for text, n, p in never[:UNEXPLORED_SHOWN])
    more = f" and {len(never) - UNEXPLORED_SHOWN} more" if len(never) > UNEXPLORED_SHOWN else ""
    evidence = {"directives": float(len(never)), "lowest_max_prob": never[0][2], "limit": UNEXPLORED_PROB}
    if recent is not None:
        evidence["recent_success"] = recent
    temperature = config_value(config, "policy.temperature")
    changes = [_change(config, "policy.temperature", "raise", 10.0, high=1.0)
               if isinstance(temperature, (int, float)) and temperature < 1.0
               else ConfigChange("policy.temperature", "raise")]
    if config_value(config, "bc.enabled") is False:
        changes.append(ConfigChange("bc.enabled", "enable"))
    return Finding(
        "unexplored_directives", "directives the policy never tries", evidence,
        (f"never sampled: {named}{more}",
         "the base model scores them far below the others and a low policy.temperature multiplies the "
         "gap (a gap of g nats a token becomes a factor exp(g / temperature)); PPO only reinforces what "
         "it samples, so if the task needs one of them, success stays at 0"),
        ("raise policy.temperature towards 1 (greedy evaluation does not depend on it)",
         "warm up with behaviour cloning from the expert", "a curriculum stage where that directive is the "
         "only way on"),
        tuple(changes),
    )


def _noop_shares(episodes: Iterable[Mapping[str, Any]]) -> tuple[dict[int, list[int]], list[tuple[float, float]]]:
    """From training transcripts: iteration -> [no-op decisions, decisions], and ``(no-op share, return)``
    of each failed episode. A step's directive is its ``directive`` text, else its chosen candidate."""
    counts: dict[int, list[int]] = {}
    failed: list[tuple[float, float]] = []
    for episode in episodes:
        iteration, noops, steps = episode.get("iteration"), 0, 0
        for step in episode.get("steps", []):
            text = step.get("directive")
            if text is None:
                candidates, choice = step.get("candidates"), step.get("choice")
                ok = isinstance(candidates, list) and isinstance(choice, int) and 0 <= choice < len(candidates)
                text = candidates[choice] if ok else None
            if text is not None:
                steps += 1
                noops += text == NOOP.text
        if not isinstance(iteration, int) or not steps:
            continue
        tally = counts.setdefault(iteration, [0, 0])
        tally[0], tally[1] = tally[0] + noops, tally[1] + steps
        ret = episode.get("return")
        if episode.get("success") is False and isinstance(ret, (int, float)) and math.isfinite(ret):
            failed.append((noops / steps, float(ret)))
    return counts, failed


def _share(counts: Mapping[int, list[int]], iterations: Iterable[int]) -> float | None:
    noops = steps = 0
    for it in iterations:
        noops, steps = noops + counts.get(it, [0, 0])[0], steps + counts.get(it, [0, 0])[1]
    return noops / steps if steps else None


def _do_nothing(records: list[dict[str, Any]], config: Mapping[str, Any] | None,
                episodes: Iterable[Mapping[str, Any]]) -> Finding | None:
    iterations, success = metric_series(records, "episode/success")
    if len(success) <= COLLAPSE_RECENT:
        return None
    best = max(success[:-COLLAPSE_RECENT])
    best_at = iterations[success.index(best)]
    recent = statistics.fmean(success[-COLLAPSE_RECENT:])
    if best < COLLAPSE_MIN_BEST or recent >= COLLAPSE_FRAC * best:
        return None
    stage = set(iterations)  # the last stage's: an earlier stage's episodes are of another world (length, deadline)
    counts, failed = _noop_shares(e for e in episodes if e.get("iteration") in stage)
    now = _share(counts, iterations[-COLLAPSE_RECENT:])
    before = _share(counts, [it for it in iterations if it <= best_at])
    if now is None or before is None or now < NOOP_SHARE_MIN or now - before < NOOP_SHARE_RISE:
        return None
    evidence = {"best_success": best, "best_iteration": float(best_at), "recent_success": recent,
                "noop_share_recent": now, "noop_share_to_best": before}
    idle = [r for share, r in failed if share >= NOOP_SHARE_MIN]
    tried = [r for share, r in failed if share < NOOP_SHARE_MIN]
    if idle and tried:
        evidence["return_failed_doing_nothing"] = statistics.fmean(idle)
        evidence["return_failed_trying"] = statistics.fmean(tried)
    # checkpoint iter_N holds the policy after iteration N's update: iteration best_at sampled iter_{best_at - 1}'s
    restart = (f"go back to checkpoints/iter_{best_at - 1:06d}, the policy that sampled iteration {best_at} (if "
               f"train.keep_checkpoints kept it): `teamtr branch RUN --at {best_at - 1}` makes a run standing there, "
               f"and `teamtr train --resume RUN-at{best_at - 1} --set algo.lr=...` continues it with a smaller step"
               if best_at > 1 else "start again with a smaller algo.lr")
    safer = evidence.get("return_failed_doing_nothing", -math.inf) > evidence.get("return_failed_trying", math.inf)
    return Finding(
        "do_nothing_collapse", "collapse to doing nothing (\"no new directive\")", evidence,
        (("doing nothing is the safer bet under this reward: a failed episode that never directs pays the "
          "failure and idle terms only, one that tries also pays for its wrong and repeated directives"
          + (" (see the two returns above)" if safer else "")),
         "a policy step too large for the stage: one update moved the policy off what worked and onto the "
         "no-op, from which few sampled episodes lead back"),
        ("lower the learning rate (a curriculum stage's own lr, or algo.lr)", restart,
         "make waiting cost more than a wrong try: strengthen the idle penalty, or soften the invalid and "
         "repeat ones"),
        (_change(config, "algo.lr", "lower", 0.3), _change(config, "rewards.weights.idle", "strengthen", 4.0)),
    )


def _last_stage(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the training iterations of a curriculum's earlier stages: training success
    falls when a stage ends because the task got harder, which is neither a crash nor a plateau."""
    stages = [r.get("curriculum/stage") for r in records if r.get("kind") == "train"]
    if not stages or stages[-1] is None:
        return records
    return [r for r in records if r.get("kind") != "train" or r.get("curriculum/stage") == stages[-1]]


def diagnose(
    source: str | Path | Sequence[Mapping[str, Any]], config: Mapping[str, Any] | None = None,
    transcripts: Iterable[Mapping[str, Any]] | None = None,
) -> list[Finding]:
    """Findings for a run directory (its ``metrics.jsonl``, ``config.yaml`` and ``transcripts.jsonl``)
    or a list of metric records (with ``transcripts``, training episodes as the trainer writes them).

    ``config`` (the resolved config tree) supplies ``algo.target_kl`` and the current values of the
    keys to change; for a run directory it defaults to the run's ``config.yaml``.
    """
    if isinstance(source, (str, Path)):
        require_run_dir(source)
        records = read_metrics(source)
        if config is None:
            config = read_config(source)
        if transcripts is None:
            transcripts = read_episodes(Path(source) / TRANSCRIPTS_FILE)
    else:
        records = [dict(r) for r in source]
    findings: list[Finding] = []
    for detector in (_oscillation, _plateau):  # a curriculum's earlier stages are other tasks
        found = detector(_last_stage(records), config)
        if found is not None:
            findings.append(found)
    findings.extend(_kl_findings(records, config))
    for detector in (_directives, _slow, _skipped, _weights, _late_stage):
        found = detector(records, config)
        if found is not None:
            findings.append(found)
    episodes = list(transcripts) if transcripts is not None else []
    for found in (_unexplored(records, config, episodes), _do_nothing(_last_stage(records), config, episodes)):
        if found is not None:
            findings.append(found)
    if any(f.code == "do_nothing_collapse" for f in findings):  # harsher penalties on tries push further to the no-op
        findings = [_without_penalties(f) if f.code == "bad_directives" else f for f in findings]
    return findings


def _without_penalties(finding: Finding) -> Finding:
    """``bad_directives`` beside a collapse to doing nothing: not its advice to strengthen penalties."""
    return dataclasses.replace(
        finding, remedies=(*finding.remedies[1:], "not harsher penalties here: the policy already collapsed to "
                           "doing nothing, which they make safer still (see do_nothing_collapse)"),
        changes=tuple(c for c in finding.changes if not c.key.startswith("rewards.weights.")))


def format_findings(findings: Sequence[Finding], iterations: int | None = None) -> str:
    """The CLI text: one numbered block per finding, ending with the ``--set`` flags to try."""
    read = f" in {iterations} training iterations" if iterations is not None else ""
    if not findings:
        return f"doctor: no problems found{read}."
    lines = [f"doctor: {len(findings)} finding{'s' if len(findings) > 1 else ''}{read}"]
    for number, f in enumerate(findings, start=1):
        evidence = ", ".join(f"{k}={v:.4g}" for k, v in f.evidence.items())
        lines += [
            f"{number}. {f.symptom}  [{f.code}]",
            f"   evidence: {evidence}",
            f"   likely causes: {'; '.join(f.causes)}",
            f"   remedies: {'; '.join(f.remedies)}",
        ]
        if f.changes:
            lines.append(f"   config: {'; '.join(str(c) for c in f.changes)}")
        flags = " ".join(f"--set {c.key}={_value(c.suggested)}" for c in f.changes if c.suggested is not None)
        if flags:
            lines.append(f"   try: {flags}")
    return "\n".join(lines)
