"""The training loop: collect with many teams as a batch -> GAE -> trust-region update -> log/eval/checkpoint.

Each tick every live team's state is scored in ONE coordinator call (prefix-shared, trie-packed); the
reference policy for the KL term is the base model (adapter disabled, ``algo.ref: base``) or the
behaviour-cloned adapter (``algo.ref: bc``), scored only when ``algo.kl_coef`` > 0.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from teamtr.atomic import atomic_write_text
from teamtr.config import Config, dump_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.rl import AlgoConfig, Rollout, make_algorithm
from teamtr.team import Team, TeamBatch, TeamState
from teamtr.telemetry.log import Progress, RunLogger
from teamtr.telemetry.metrics import EpisodeTracker, summarize
from teamtr.train import bc as bc_mod
from teamtr.train.checkpoint import latest_checkpoint, load_checkpoint, load_state, save_checkpoint
from teamtr.train.curriculum import Curriculum


def build_coordinator(config: Config) -> Any:
    from teamtr.policy.backbone import load_backbone
    from teamtr.policy.coordinator import Coordinator, LoraSettings

    m = config.model
    backbone = load_backbone(m.backbone, device=m.device, dtype=m.dtype)
    lora = LoraSettings(m.lora.rank, m.lora.alpha, m.lora.dropout, tuple(m.lora.target_modules))
    return Coordinator(backbone, train_layers=m.train_layers, lora=lora,
                       normalization=config.policy.normalization, temperature=config.policy.temperature,
                       layer_lr_decay=m.layer_lr_decay, value_grad_to_trunk=m.value_grad_to_trunk)


class CoordinatorPolicy:
    """The coordinator as an evaluation ``Policy`` (greedy by default), in chunks of ``batch``."""

    # 16 decisions per call: on a 2-core CPU larger batches pad more and ran 20-25% slower per decision.
    def __init__(self, coordinator: Any, greedy: bool = True, batch: int = 16, seed: int = 0) -> None:
        self.coordinator, self.greedy, self.batch = coordinator, greedy, batch
        self.generator = torch.Generator().manual_seed(seed)

    def choose(self, states: list[TeamState]) -> list[int]:
        out: list[int] = []
        for s in range(0, len(states), self.batch):
            out += self.coordinator.act(states[s : s + self.batch], greedy=self.greedy,
                                        generator=self.generator).choices
        return out


class MergedPolicy(CoordinatorPolicy):
    """Evaluation with the adapter merged into the weights: ``evaluate_table`` enters ``session()``
    once around all of this policy's episodes, so the merge is paid (and rounded) once, not per tick."""

    def session(self) -> Any:
        return self.coordinator.merged()


@contextlib.contextmanager
def adapter_weights(coordinator: Any, state: dict[str, torch.Tensor]) -> Iterator[None]:
    """Temporarily put another adapter's weights (e.g. the BC snapshot) into the coordinator."""
    params = dict(coordinator.peft.named_parameters())
    saved = {k: params[k].detach().clone() for k in state}
    with torch.no_grad():
        for k, v in state.items():
            params[k].copy_(v)
    coordinator.weights_changed()
    try:
        yield
    finally:
        with torch.no_grad():
            for k, v in saved.items():
                params[k].copy_(v)
        coordinator.weights_changed()


def adapter_state(coordinator: Any) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in coordinator.peft.named_parameters() if p.requires_grad}


class Trainer:
    def __init__(self, config: Config, resume: bool = False, coordinator: Any = None) -> None:
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.options = config.env.options()
        make(config.env.name, **self.options)  # fail now, with the world's own message, on bad options
        self.curriculum = Curriculum(config.curriculum.stages, self.options)
        for i, stage in enumerate(config.curriculum.stages):
            try:
                make(config.env.name, **{**self.options, **stage.env})
            except TeamTRError as err:
                raise TeamTRError(f"curriculum.stages[{i}].env: {err}") from None
        self.rewards = config.rewards.composer()
        torch.manual_seed(config.seed)
        self.coordinator = coordinator or build_coordinator(config)
        algo_opts = dict(config.algo.algo_options())
        algo_opts.setdefault("total_updates", max(1, config.train.iterations))
        algo_opts.setdefault("seed", config.seed)
        self.algo_config = AlgoConfig.from_dict(algo_opts)
        self.algo: Any = None  # built once behaviour cloning is done (it may freeze lower layers)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.iteration = 0
        self.train_seed = config.seed * 100_003  # training episodes never reuse held-out seeds
        self.bc_done = False
        self.bc_state: dict[str, torch.Tensor] | None = None
        self.episode_id = 0
        resume_at = None
        ckpt = latest_checkpoint(self.run_dir) if resume else None
        if resume and ckpt is None and (self.run_dir / "metrics.jsonl").exists():
            resume_at = -1  # killed before the first checkpoint: start over, drop its lines
        if ckpt is not None:
            state = load_checkpoint(ckpt, self.coordinator)
            self.iteration = state["iteration"]
            self.train_seed = state["train_seed"]
            self.episode_id = state["episode_id"]
            self.bc_done = state["bc_done"]
            self.generator.set_state(state["generator"])
            self.curriculum.load_state_dict(state.get("curriculum", {}))
            resume_at = self.iteration
        if self.bc_done or not config.bc.enabled:
            self._start_rl()
            if ckpt is not None:
                self.algo.load_state_dict(load_state(ckpt, "algo"))
        if self.bc_done and config.algo.ref == "bc" and (self.run_dir / "bc").is_dir():
            self.bc_state = self._load_bc_state()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.run_dir / "config.yaml", dump_config(config))
        if resume_at == -1:
            for f in ("metrics.jsonl", "transcripts.jsonl"):
                (self.run_dir / f).unlink(missing_ok=True)
            resume_at = None
        self.logger = RunLogger(self.run_dir, tensorboard=config.log.tensorboard, wandb=config.log.wandb,
                                wandb_project=config.log.wandb_project, config=config.model_dump(mode="json"),
                                resume_iteration=resume_at, keep_kinds=("bc",))
        if resume_at is not None:
            self._truncate_transcripts(resume_at)

    # ------------------------------------------------------------------ pieces
    def _start_rl(self) -> None:
        """Freeze all but the top ``model.rl_layers`` adapters, then build the algorithm over what trains."""
        self.coordinator.train_only_top(self.config.model.rl_layers)
        self.algo = make_algorithm(self.config.algo.name, self.coordinator.policy_param_groups(),
                                   self.coordinator.value_parameters(), self.algo_config)

    def make_team(self, **overrides: Any) -> Team:
        """A team in the world training uses now: the curriculum's stage, else ``env``."""
        return self._team({**self.curriculum.options(), **overrides})

    def _team(self, options: dict[str, Any]) -> Team:
        return Team(make(self.config.env.name, **options), rewards=self.rewards,
                    history_len=self.config.team.history_len)

    def _load_bc_state(self) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        path = self.run_dir / "bc" / "adapter" / "adapter_model.safetensors"
        loaded = load_file(str(path))
        names = [k for k, p in self.coordinator.peft.named_parameters() if p.requires_grad]
        by_suffix = {k.replace(".default", ""): v for k, v in loaded.items()}
        return {k: by_suffix[k.replace(".default", "")] for k in names if k.replace(".default", "") in by_suffix}

    def _truncate_transcripts(self, iteration: int) -> None:
        path = self.run_dir / "transcripts.jsonl"
        if not path.exists():
            return
        keep = [line for line in path.read_text().splitlines()
                if line.strip() and json.loads(line).get("iteration", 0) <= iteration]
        atomic_write_text(path, "".join(line + "\n" for line in keep))

    def warm_up(self) -> None:
        """Behaviour cloning before RL (once per run; a resumed run skips it)."""
        cfg = self.config.bc
        if not cfg.enabled or self.bc_done:
            return
        demos = list(bc_mod.file_demos(cfg.files, cfg.success_weighted)) if cfg.files else []
        if cfg.demos:
            demos += bc_mod.expert_demos(self.make_team, cfg.demos, seed=self.train_seed, explore=cfg.explore,
                                         parallel=self.config.rollout.parallel)
            self.train_seed += cfg.demos
        heldout = bc_mod.expert_demos(lambda: self._team(self.options), 64,  # the task itself, not a stage
                                      seed=self.config.train.eval_seed_offset + 500_000)
        start = time.perf_counter()
        bc_mod.behaviour_clone(
            self.coordinator, demos, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
            seed=self.config.seed, heldout=heldout,
            log=lambda step, m: self.logger.log("bc", step, {**m, "perf/wall_time": time.perf_counter() - start}),
        )
        self.bc_done = True
        self.coordinator.save(self.run_dir / "bc")
        if self.config.algo.ref == "bc":
            self.bc_state = adapter_state(self.coordinator)

    def _skips_reference(self) -> bool:
        return self.algo_config.kl_coef == 0 and self.algo_config.kl_control == "fixed"

    @torch.no_grad()
    def _ref_logp(self, states: Sequence[TeamState], logp: torch.Tensor) -> torch.Tensor:
        if self._skips_reference():
            return logp  # no KL term: skip the reference pass (it would double acting time)
        if self.config.algo.ref == "bc" and self.bc_state is not None:
            with adapter_weights(self.coordinator, self.bc_state):
                return self.coordinator.act(states, greedy=True).logp
        with self.coordinator.disable_adapter():
            return self.coordinator.act(states, greedy=True).logp

    def collect(self) -> tuple[Rollout, list[dict[str, float]], list[dict[str, Any]]]:
        """Run ``rollout.episodes`` episodes, ``rollout.parallel`` teams at a time."""
        cfg = self.config.rollout
        rollout = Rollout()
        episodes: list[Any] = []
        transcripts: list[dict[str, Any]] = []
        remaining = cfg.episodes
        while remaining > 0:
            n = min(cfg.parallel, remaining)
            remaining -= n
            teams = [self.make_team() for _ in range(n)]
            seeds = list(range(self.train_seed, self.train_seed + n))
            self.train_seed += n
            batch = TeamBatch(teams)
            batch.reset(seeds)
            ids = list(range(self.episode_id, self.episode_id + n))
            self.episode_id += n
            trackers = [EpisodeTracker(len(t.world.agents)) for t in teams]
            steps: list[list[dict[str, Any]]] = [[] for _ in teams]
            while live := batch.live():
                states = batch.states()
                out = self.coordinator.act(states, keep=True, generator=self.generator)
                ref = self._ref_logp(states, out.logp)
                results = batch.step(out.choices)
                # A time limit that is not part of the task truncates: bootstrap from V(s_T) there.
                cut = [k for k, r in enumerate(results) if r[3]["truncated"]]
                boot = torch.zeros(len(results))
                if cut:
                    boot[cut] = self.coordinator.act([results[k][0] for k in cut]).values.float().cpu()
                for k, (i, (_, reward, done, info)) in enumerate(zip(live, results)):
                    c = len(states[k].candidates)
                    rollout.append(
                        logp=out.logp[k, :c], ref_logp=ref[k, :c], mask=out.mask[k, :c], actions=out.choices[k],
                        values=out.values[k], rewards=reward, terminated=info["terminated"],
                        truncated=info["truncated"], episode_id=ids[i], handles=out.handles[k],
                        bootstrap_values=boot[k],
                    )
                    trackers[i].update(info["directive"], info["events"], reward, info["ticks"])
                    steps[i].append({"tick": states[k].tick, "state": states[k].state,
                                     "history": list(states[k].history),
                                     "candidates": [d.text for d in states[k].candidates],
                                     "choice": out.choices[k], "directive": info["directive"].text,
                                     "reward": reward, "events": [e.kind for e in info["events"]]})
            for i, tracker in enumerate(trackers):
                m = tracker.finish()
                episodes.append(m)
                transcripts.append({"seed": seeds[i], "task": teams[i].world.task, "success": bool(m.success),
                                    "return": m.episode_return, "steps": steps[i]})
        return rollout, [e.as_dict() for e in episodes], transcripts

    def evaluate(self, episodes: int, suite: str = "heldout", **overrides: Any) -> dict[str, float]:
        from teamtr.eval.evaluate import run_episodes

        seeds = range(self.config.train.eval_seed_offset, self.config.train.eval_seed_offset + episodes)
        result = run_episodes(self.config.env.name, {**self.options, **overrides},
                              CoordinatorPolicy(self.coordinator, greedy=True), list(seeds), rewards=self.rewards,
                              history_len=self.config.team.history_len)
        return summarize(result)

    # ------------------------------------------------------------------ loop
    def run(self) -> dict[str, float]:
        cfg = self.config.train
        self.warm_up()
        if self.algo is None:
            self._start_rl()
        total = max(1, cfg.iterations)
        progress = Progress(total, start_iteration=self.iteration)
        last_eval: dict[str, float] = {}
        try:
            while self.iteration < cfg.iterations:
                it = self.iteration + 1
                self.rewards.set_progress(it)
                t0 = time.perf_counter()
                rollout, episodes, transcripts = self.collect()
                t_collect = time.perf_counter() - t0
                rollout.compute_advantages(self.algo_config.gamma, self.algo_config.lam,
                                           self.algo_config.normalize_advantages)
                metrics = self.algo.update(lambda mb: self.coordinator.evaluate(mb.handles), rollout)
                if self._skips_reference():
                    metrics["policy/kl_ref_new"] = float("nan")  # not measured: no reference pass was run
                self.coordinator.weights_changed()
                self.coordinator.forget()
                ep = {f"episode/{k if k != 'episode_return' else 'return'}": v
                      for k, v in _mean(episodes).items()}
                wall = time.perf_counter() - t0
                line = {**ep, **metrics, "perf/decisions_per_s": len(rollout) / max(t_collect, 1e-9),
                        "perf/iteration_s": wall, "perf/decisions": len(rollout)}
                if self.curriculum.stages:
                    line["curriculum/stage"] = self.curriculum.stage  # the stage this iteration trained on
                    self.curriculum.record(ep["episode/success"])
                self.logger.log("train", it, line)
                self._write_transcripts(it, transcripts[: self.config.log.transcripts])
                if cfg.eval_every and it % cfg.eval_every == 0:
                    last_eval = self.evaluate(cfg.eval_episodes)
                    self.logger.log("eval", it, {"suite": "heldout", **{f"eval/{k}": v for k, v in last_eval.items()}})
                self.iteration = it
                if it % cfg.checkpoint_every == 0 or it == cfg.iterations:
                    self.checkpoint()
                progress.update(it, line)
        finally:
            progress.close()
        return last_eval

    def _write_transcripts(self, iteration: int, transcripts: list[dict[str, Any]]) -> None:
        with open(self.run_dir / "transcripts.jsonl", "a", encoding="utf-8") as f:
            for t in transcripts:
                f.write(json.dumps({"iteration": iteration, **t}) + "\n")

    def checkpoint(self) -> Path:
        return save_checkpoint(
            self.run_dir, self.iteration, self.coordinator, self.algo,
            {"train_seed": self.train_seed, "episode_id": self.episode_id, "bc_done": self.bc_done,
             "generator": self.generator.get_state(), "curriculum": self.curriculum.state_dict()},
            keep=self.config.train.keep_checkpoints,
        )

    def close(self) -> None:
        self.logger.close()


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        raise TeamTRError("No episodes were collected; rollout.episodes must be >= 1.")
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
