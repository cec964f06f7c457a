"""The training loop: collect with many teams as a batch -> GAE -> trust-region update -> log/eval/checkpoint.

Each tick every live team's state is scored in ONE coordinator call (prefix-shared, trie-packed; see
``train/collect.py``); the reference policy for the KL term is the base model (adapter disabled,
``algo.ref: base``) or the behaviour-cloned adapter (``algo.ref: bc``), in every directive mode,
scored only when ``algo.kl_coef`` > 0. A trainer holds its run directory's lock (``train/lock.py``) until ``close``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any, ContextManager, Sequence

import torch

from teamtr.atomic import atomic_write_text
from teamtr.config import Config, directive_modes, dump_config
from teamtr.core import TeamTRError
from teamtr.envs import make
from teamtr.envs.registry import world_class
from teamtr.hierarchy import GoalSchedule, check_goals
from teamtr.eval.team_agents import agent_factory, check_team
from teamtr.policy.coordinator import CoordinatorLike, build_coordinator, check_layers
from teamtr.policy.scoring import double_backward_attention
from teamtr.rl import PPO, AlgoConfig, Algorithm, Rollout, make_algorithm
from teamtr.team import Team, TeamState
from teamtr.telemetry.doctor import all_steps_skipped
from teamtr.telemetry.log import METRICS_FILE, TRANSCRIPTS_FILE, RunLogger, read_metrics
from teamtr.telemetry.metrics import headline_metrics, summarize
from teamtr.telemetry.progress import Progress, iteration_stats, say
from teamtr.train import bc as bc_mod
from teamtr.train import roles as roles_mod
from teamtr.train.card import write_model_card
from teamtr.train.checkpoint import load_checkpoint, load_state, resolve_checkpoint, save_checkpoint
from teamtr.train.collect import TrainSeeds, make_collector
from teamtr.train.curriculum import Curriculum
from teamtr.train.distributed import Distributed, RankSeeds, rank_seed
from teamtr.train.interrupt import resume_hint, uninterrupted
from teamtr.train.hierarchy import Hierarchy, updates_per_level
from teamtr.train.judge import build_judge
from teamtr.train.lock import RunLock
from teamtr.train.ray_rollout import TeamRecipe
from teamtr.train.replay import ReplayTerm, SuccessReplay
from teamtr.train.free_text import FreeTextActor
from teamtr.train.whole_team import TokenActor, WholeTeamActor, token_update
from teamtr.train.resume import (KEEP_KINDS, check_resume_config, load_algo_state, record_resume, resume_checkpoint,
                                 truncate_transcripts)

#: Consecutive iterations whose every update step was skipped (non-finite loss or gradient) before
#: the run stops: one can be a fluke batch, three in a row is a run that can no longer learn.
SKIP_LIMIT = 3



def _oracle(directives: str) -> str:
    """Which oracle demonstrations follow in a run directing in ``directives``: whole-team lines in
    whole-team and free-text runs (a free text may order several agents), else one directive a tick."""
    return "single" if directives == "single" else "whole_team"

class Trainer:
    """Trains a coordinator on ``config`` in ``config.run_dir`` (``resume``: from its newest complete
    checkpoint); ``run()`` then ``close()``, or use it as a context manager."""

    def __init__(self, config: Config, resume: bool = False, coordinator: CoordinatorLike | None = None,
                 dist: Distributed | None = None) -> None:
        self.config = config
        self.dist = dist or Distributed.from_env()  # torchrun: this rank's place (train/distributed.py)
        self.run_dir = Path(config.run_dir)
        self.options = config.env.options()
        self._check_options()
        self.resume_changes = check_resume_config(self.run_dir, config) if resume else {}
        self.curriculum = Curriculum(config.curriculum.stages, self.options, config.team.directives)
        self.rewards = config.rewards.composer()
        torch.manual_seed(config.seed)
        self.coordinator: CoordinatorLike = coordinator or build_coordinator(config)
        self.roles_done = not config.team.llm.role_adapters.enabled  # train/roles.py: tuned before the coordinator
        if not self.roles_done:
            roles_mod.attach(config, self.coordinator)
        self.make_agent = agent_factory(config, self.coordinator)  # None: scripted role agents
        self.algo_config = self._algo_config()
        self.algo: Algorithm | None = None  # built once behaviour cloning is done (it may freeze lower layers)
        self.seeds = TrainSeeds(config.seed, config.train.eval_seed_offset)
        a = config.algo
        self.replay = SuccessReplay(a.replay_capacity, a.replay_alpha, config.seed) if a.replay_coef > 0 else None
        self.judge = build_judge(config, self.coordinator)
        self.hierarchy = Hierarchy(config, self.coordinator, self._ref_logp) if config.team.hierarchy.enabled else None
        seeds = RankSeeds(self.seeds, self.dist.rank, self.dist.world_size) if self.dist.active else self.seeds
        self.actors = self._token_actors()
        self._check_backends()
        self.collector = make_collector(config.rollout, self.coordinator, self.make_team, seeds,
                                        torch.Generator().manual_seed(rank_seed(config.seed, self.dist.rank, 0)),
                                        self._ref_logp, recipe=lambda: self._recipe(self.curriculum.options()),
                                        group_size=config.rollout.group_size, noise=config.policy.noise,
                                        replay=self.replay, actor=self._actor(), judge=self.judge,
                                        hierarchy=self.hierarchy)
        self.iteration, self.bc_done, self.skipped_in_a_row = 0, False, 0
        self.bc_state: dict[str, torch.Tensor] | None = None
        # The run directory is made only now, once the model loaded and every check passed; a setup
        # that still fails takes back what it made, so the same command can be run again.
        existed = self.run_dir.exists()
        before = {p.name for p in self.run_dir.iterdir()} if existed else set()
        self.lock = RunLock(self.run_dir) if self.dist.is_main else None  # rank 0 alone writes the run
        try:
            resume_at = self._restore() if resume else None
            if resume_at is None and config.model.init:
                self._warm_start(config.model.init)
            if self.algo is None and not config.bc.enabled:
                self._start_rl()
            if self.dist.is_main:
                self._open_logs(resume, resume_at)
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            if not resume and self.dist.is_main:
                _take_back(self.run_dir, existed, before)
            raise

    # ------------------------------------------------------------------ setup steps
    def _check_options(self) -> None:
        """Fail now, before the model loads or the run directory is touched: bad world or
        curriculum-stage options (with the world's own message), log.wandb without wandb, or
        model.train_layers / model.rl_layers beyond the backbone's layers."""
        check_layers(self.config.model)
        if self.config.log.wandb and importlib.util.find_spec("wandb") is None:
            raise TeamTRError("log.wandb is true but Weights & Biases is not installed: pip install 'teamtr[wandb]' "
                              "(or --set log.wandb=false).")
        world = make(self.config.env.name, **self.options)
        check_team(self.config, world)
        if self.config.team.hierarchy.enabled:
            check_goals(world)
        for i, stage in enumerate(self.config.curriculum.stages):
            try:
                make(self.config.env.name, **{**self.options, **stage.env})
            except TeamTRError as err:
                raise TeamTRError(f"curriculum.stages[{i}].env: {err}") from None

    def _token_actors(self) -> dict[str, TokenActor]:
        """The actor of each token-level mode the run trains in (``config.directive_modes``; the
        config checked that algo.name is ppo and that an algo.ref=bc reference will exist)."""
        reference = None if self._skips_reference() else self.reference_weights
        actors: dict[str, TokenActor] = {}
        for mode in directive_modes(self.config):
            if mode == "whole_team":
                actors[mode] = WholeTeamActor(self.coordinator, reference)
            elif mode == "free_text":
                actors[mode] = FreeTextActor(self.coordinator, reference, self.config.policy.max_new_tokens)
        return actors

    def _actor(self) -> TokenActor | None:
        """The actor of the directive mode training uses now (None: single directives)."""
        return self.actors.get(self.curriculum.directives())

    def _algo_config(self) -> AlgoConfig:
        opts = dict(self.config.algo.algo_options())
        opts.setdefault("total_updates", updates_per_level(self.config))
        opts.setdefault("seed", self.config.seed)
        return AlgoConfig.from_dict(opts)

    def _restore(self) -> int | None:
        """Load the newest complete checkpoint; return its iteration (None: nothing to resume)."""
        ckpt = resume_checkpoint(self.run_dir)
        if ckpt is None:
            return None
        state = load_checkpoint(ckpt, self.coordinator)
        self.iteration = state["iteration"]
        self.seeds.next = state["train_seed"]
        self.collector.episode_id = state["episode_id"]
        self.bc_done = state["bc_done"]
        self.roles_done = state.get("roles_done", self.roles_done)
        self.collector.generator.set_state(state["generator"])
        if self.dist.rank:  # rank 0's stream was saved; the others draw their own from here
            self.collector.generator.manual_seed(rank_seed(self.config.seed, self.dist.rank, self.iteration))
        self.curriculum.load_state_dict(state.get("curriculum", {}))
        if self.replay is not None and "replay" in state:  # replay switched on at resume: starts empty
            self.replay.load_state_dict(state["replay"])
        if self.bc_done or not self.config.bc.enabled:
            self._start_rl()
            load_algo_state(self.algo, load_state(ckpt, "algo"))
            if self.hierarchy is not None:
                self.hierarchy.load_state_dict(state["hierarchy"])
        if self.bc_done and self.config.algo.ref == "bc" and (self.run_dir / "bc").is_dir():
            self.bc_state = self.coordinator.read_adapter(self.run_dir / "bc")
        return self.iteration

    def _check_backends(self) -> None:
        """What runs only on the inline rollout backend or in one learner process (no torchrun)."""
        config, dist = self.config, self.dist
        if dist.active and config.rollout.backend == "ray":
            raise TeamTRError("rollout.backend = ray with torchrun is not supported: run ray with one learner "
                              "process, or --set rollout.backend=inline under torchrun.")
        if config.rollout.backend == "ray" and self.make_agent is not None:
            raise TeamTRError("team.agents (LLM or remote role agents) run on the inline rollout backend for now: "
                              "--set rollout.backend=inline, or leave team.agents empty (scripted agents).")
        if self.actors and (dist.active or config.rollout.backend == "ray"):
            raise TeamTRError(f"team.directives = {next(iter(self.actors))} (here or in a curriculum stage) runs in one "
                              "learner process on the inline rollout backend for now: run it without torchrun and "
                              "with rollout.backend=inline, or use team.directives=single.")
        if dist.active and config.team.hierarchy.enabled:
            raise TeamTRError("team.hierarchy runs in one learner process for now; run it without torchrun.")
        if dist.active and config.algo.algo_options().get("micro_batch_size") is not None:
            # torchrun all-reduces the gradients after every backward pass; chunks would be summed again
            raise TeamTRError("algo.micro_batch_size runs in one learner process for now: under torchrun each "
                              "rank's minibatch is already a share of the global one; remove it, or lower "
                              "algo.minibatch_size.")

    def _warm_start(self, init: str) -> None:
        """Load ``model.init``'s adapter and value head; without behaviour cloning it is the warm start
        (kept as ``bc/``, so that algo.ref=bc measures KL against it, on resume too)."""
        try:
            folder, _ = resolve_checkpoint(init)
            self.coordinator.load(folder)
        except TeamTRError as err:
            raise TeamTRError(f"model.init={init}: {err}") from None
        if self.config.bc.enabled:
            return  # behaviour cloning continues from it
        self.bc_done = True
        if self.dist.is_main:
            with uninterrupted():
                self.coordinator.save(self.run_dir / "bc")
        if self.config.algo.ref == "bc":
            self.bc_state = self.coordinator.adapter_state()

    def _open_logs(self, resume: bool, resume_at: int | None) -> None:
        """Write the config; open the metrics log, cut back to ``resume_at`` (a run killed before its
        first checkpoint starts over: its lines are dropped)."""
        with uninterrupted():
            atomic_write_text(self.run_dir / "config.yaml", dump_config(self.config))
        if resume and resume_at is None:
            for f in (METRICS_FILE, TRANSCRIPTS_FILE):
                (self.run_dir / f).unlink(missing_ok=True)
        c = self.config
        self.logger = RunLogger(self.run_dir, tensorboard=c.log.tensorboard, wandb=c.log.wandb,
                                wandb_project=c.log.wandb_project, config=c.model_dump(mode="json"),
                                resume_iteration=resume_at, keep_kinds=KEEP_KINDS)
        if resume_at is not None:
            truncate_transcripts(self.run_dir, resume_at)
            record_resume(self.run_dir, resume_at, self.resume_changes)

    def _start_rl(self) -> None:
        """Freeze all but the top ``model.rl_layers`` adapters, then build the algorithm over what trains."""
        self.coordinator.train_only_top(self.config.model.rl_layers)
        if self.dist.active and self.config.algo.name == "trpo":
            raise TeamTRError("algo.name = trpo runs in one process only (its line search is not split across "
                              "ranks); run it without torchrun, or choose ppo, pg, grpo or rloo.")
        self.algo = make_algorithm(self.config.algo.name, self.coordinator.policy_param_groups(),
                                   self.coordinator.value_parameters(), self.algo_config)
        if self.hierarchy is not None:
            self.hierarchy.start(self.config.algo.name, self.algo_config)
        self._restart_schedules(self.iteration)  # a resumed run then loads the schedules' own state
        self._apply_stage_lr()
        if self.replay is not None:
            if not isinstance(self.algo, PPO):
                raise TeamTRError(f"algo.replay_coef > 0 needs a PPO-family algo.name (ppo, pg, grpo, rloo), not "
                                  f"{self.config.algo.name!r}; set algo.replay_coef=0.")
            a = self.config.algo
            self.algo.auxiliary = ReplayTerm(self.coordinator, self.replay, a.replay_coef, a.replay_batch)

    # ------------------------------------------------------------------ pieces
    @property
    def episode_id(self) -> int:
        return self.collector.episode_id

    def make_team(self, **overrides: Any) -> Team:
        """A team in the world training uses now: the curriculum's stage, else ``env``."""
        return self._team({**self.curriculum.options(), **overrides})

    def _team(self, options: dict[str, Any]) -> Team:
        return self._recipe(options)()

    def _recipe(self, options: dict[str, Any]) -> TeamRecipe:
        """How to build a team in a world with ``options`` (picklable: Ray workers build theirs from it)."""
        return TeamRecipe(self.config.env.name, dict(options), self.rewards, self.config.team.history_len,
                          self.make_agent)

    def warm_up(self) -> None:
        """Behaviour cloning before RL (once per run; a resumed run skips it). A hierarchical coordinator
        clones both levels: the tactical adapter on the oracle's directives under the oracle's goals,
        the strategic adapter on those goal choices."""
        cfg = self.config.bc
        if not cfg.enabled or self.bc_done:
            return
        demos = list(bc_mod.file_demos(cfg.files, cfg.success_weighted)) if cfg.files else []
        # clone in the directive mode training starts in: the whole-team oracle's outputs for whole-team
        # training (a single-decision clone never writes "carry on"), as text for free-text training (a
        # candidate-scoring clone never learns to write); demonstrations follow the whole-team oracle in both
        mode = self.curriculum.directives()
        schedule = self.hierarchy.schedule if self.hierarchy is not None else None
        goals: list[bc_mod.Demo] = []
        heldout_goals: list[bc_mod.Demo] = []
        if cfg.demos:
            parallel = self.config.rollout.parallel
            # Demonstrations come from the world training starts in: a curriculum's first stage, said so
            # (the held-out demonstrations below are the task's, so their accuracy is a transfer then).
            stage = self.curriculum.describe()
            what = f"demo collection ({stage})" if stage else "demo collection"
            # expert_demos uses up to demos + parallel episodes (one decision each at the least).
            demos += bc_mod.expert_demos(self.make_team, cfg.demos, seed=self.seeds.take(cfg.demos + parallel),
                                         explore=cfg.explore, parallel=parallel, mode=_oracle(mode),
                                         schedule=schedule, goals=goals, what=what)
        heldout = bc_mod.expert_demos(lambda: self._team(self.options), 64,  # the task itself, not a stage
                                      seed=self.config.train.eval_seed_offset + 500_000, what="held-out demos",
                                      mode=_oracle(mode), schedule=schedule, goals=heldout_goals)
        start = time.perf_counter()
        steps = bc_mod.behaviour_clone(
            self.coordinator, demos, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
            seed=self.config.seed, schedule=cfg.schedule, heldout=heldout, mode=mode, noop_weight=cfg.noop_weight,
            log=lambda step, m: self._log("bc", step, {**m, "perf/wall_time": time.perf_counter() - start}),
        ).get("bc/step", 0)
        steps = self._dagger(demos, heldout, schedule, int(steps), start)
        if goals:
            self._clone_goals(goals, heldout_goals, int(steps), start)
        self.bc_done = True
        if self.dist.is_main:  # every rank cloned the same demonstrations: one copy is written
            with uninterrupted():
                self.coordinator.save(self.run_dir / "bc")
        if self.config.algo.ref == "bc":
            self.bc_state = self.coordinator.adapter_state()

    def _dagger(self, demos: list[bc_mod.Demo], heldout: list[bc_mod.Demo], schedule: GoalSchedule | None,
                after: int, start: float) -> int:
        """``bc.dagger_rounds`` rounds of DAgger after the first clone: the clone acts greedily (in the
        training world with ``bc.dagger_env`` over it), the oracle labels what it reaches, and the clone is
        trained again on every demonstration so far, ``bc.dagger_epochs`` over the round's new ones (logged as
        ``bc`` lines numbered on from ``after``; a round's first line carries ``bc/dagger_round``,
        ``bc/dagger_agreement``, the share of the clone's choices that were the oracle's, and ``bc/demos``).
        Returns the last step's number."""
        cfg = self.config.bc
        parallel = self.config.rollout.parallel
        n, epochs = cfg.dagger_demos or cfg.demos, cfg.dagger_epochs or cfg.epochs
        for r in range(1, cfg.dagger_rounds + 1):
            new, agreement = bc_mod.learner_demos(self.coordinator, lambda: self.make_team(**cfg.dagger_env), n,
                                                  seed=self.seeds.take(n + parallel),
                                                  explore=cfg.explore, parallel=parallel, what=f"DAgger round {r}",
                                                  schedule=schedule)
            demos += new
            say(f"DAgger round {r}: the clone chose the oracle's directive on {agreement:.3f} of {len(new)} "
                f"decisions it reached; cloning again on {len(demos)}")
            first = {"bc/dagger_round": float(r), "bc/dagger_agreement": agreement, "bc/demos": float(len(demos))}

            def log(step: int, m: dict[str, float], base: int = after, extra: dict[str, float] = first) -> None:
                self._log("bc", base + step, {**m, "bc/step": base + step, **(extra if step == 1 else {}),
                                              "perf/wall_time": time.perf_counter() - start})

            after += int(bc_mod.behaviour_clone(
                self.coordinator, demos, epochs=epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                seed=self.config.seed + 100 + r, schedule=cfg.schedule, heldout=heldout, mode="single",
                steps=max(1, epochs * len(new) // cfg.batch_size), what=f"DAgger round {r} cloning", log=log,
                noop_weight=cfg.noop_weight,
            ).get("bc/step", 0))
        return after

    def _clone_goals(self, goals: list[bc_mod.Demo], heldout: list[bc_mod.Demo], after: int, start: float) -> None:
        """Clone the strategic adapter on the oracle's goal choices (logged as ``bc/strategic_*``,
        steps numbered on from the tactical cloning's ``after``)."""
        from teamtr.policy.levels import use_level

        cfg = self.config.bc
        say(f"behaviour cloning the strategic level on {len(goals)} goal choices")

        def log(step: int, m: dict[str, float]) -> None:
            named = {k.replace("bc/", "bc/strategic_", 1): v for k, v in m.items()}
            self._log("bc", after + step, {**named, "perf/wall_time": time.perf_counter() - start})

        with use_level(self.coordinator, "strategic"):
            bc_mod.behaviour_clone(self.coordinator, goals, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                                   seed=self.config.seed + 1, schedule=cfg.schedule, heldout=heldout, log=log)

    def tune_roles(self) -> None:
        """Behaviour-clone the LLM role agents' adapters (``team.llm.role_adapters``; once per run)."""
        if self.roles_done:
            return
        summary = roles_mod.run_stage(self.config, self.coordinator, log=lambda step, m: self._log("roles", step, m))
        self.roles_done = True
        say(f"role agents tuned: agreement with the scripted choice {summary['roles/agreement_before']:.3f} -> "
            f"{summary['roles/agreement_after']:.3f} on {summary['roles/heldout']:.0f} held-out views")

    def _skips_reference(self) -> bool:
        return self.algo_config.kl_coef == 0 and self.algo_config.kl_control == "fixed"

    def reference_weights(self) -> ContextManager[None]:
        """The KL reference's weights, in every directive mode: the behaviour-cloned adapter
        (``algo.ref: bc``, once cloned), else the base model (the adapter off)."""
        if self.config.algo.ref == "bc" and self.bc_state is not None:
            return self.coordinator.use_adapter(self.bc_state)
        return self.coordinator.disable_adapter()

    @torch.no_grad()
    def _ref_logp(self, states: Sequence[TeamState], logp: torch.Tensor) -> torch.Tensor:
        """The KL reference's log-probs [B, Cmax] at ``states`` (``logp``: the policy's, [B, Cmax])."""
        if self._skips_reference():
            return logp  # no KL term: skip the reference pass (it would double acting time)
        with self.reference_weights():
            return self.coordinator.act(states, greedy=True).logp

    def collect(self) -> tuple[Rollout, list[dict[str, float]], list[dict[str, Any]]]:
        """Run ``rollout.episodes`` episodes, ``rollout.parallel`` teams at a time (under torchrun each
        rank runs its share; the rollout and episode metrics are then every rank's, transcripts its own),
        in the directive mode of the curriculum's stage."""
        self.collector.actor = self._actor()
        rollout, episodes, transcripts = self.collector.collect(self.dist.share(self.config.rollout.episodes),
                                                                self.config.rollout.parallel)
        return self.dist.gather_rollout(rollout), self.dist.gather_objects(episodes), transcripts

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One algorithm update on ``rollout``; the coordinator's memos and stored decisions go after it."""
        assert self.algo is not None, "update() before the algorithm was built"
        c = self.algo_config
        # PPO and PG evaluate every decision once per epoch (a minibatch at once, or in micro-batches);
        # TRPO's line search makes its count open.
        steps = c.epochs * len(rollout) if isinstance(self.algo, PPO) else None
        progress = Progress("update", steps, unit="decisions", lines=1)

        trainable = [*self.algo.policy_tensors, *self.algo.value_tensors]
        scored = self.dist.sharded_evaluate(self.coordinator.evaluate, trainable)

        def evaluate(mb: Any) -> tuple[torch.Tensor, torch.Tensor]:
            out = scored(mb)
            progress.advance(len(mb))
            return out

        twice = double_backward_attention() if self.algo.needs_double_backward else contextlib.nullcontext()
        try:
            with twice, self.dist.reduce_gradients(trainable):
                if self.collector.actor is not None:
                    metrics = token_update(self.algo, self.collector.actor, rollout, self.config.algo.token_level)
                else:
                    metrics = self.algo.update(evaluate, rollout)
        finally:
            progress.close()
            self.coordinator.after_update()
        if self._skips_reference():
            metrics["policy/kl_ref_new"] = float("nan")  # not measured: no reference pass was run
        return metrics

    def evaluate(self, episodes: int, suite: str = "heldout", **overrides: Any) -> dict[str, float]:
        from teamtr.eval.evaluate import run_episodes
        from teamtr.eval.policies import CoordinatorPolicy, HierarchicalPolicy
        from teamtr.eval.suites import eval_options

        seeds = range(self.config.train.eval_seed_offset, self.config.train.eval_seed_offset + episodes)
        policy = (HierarchicalPolicy(self.coordinator, self.hierarchy.schedule) if self.hierarchy is not None
                  else CoordinatorPolicy(self.coordinator, greedy=True, directives=self.config.team.directives,
                                         max_new_tokens=self.config.policy.max_new_tokens))
        options = eval_options(self.options, {**self.config.train.eval_env, **overrides})
        result = run_episodes(self.config.env.name, options, policy, list(seeds), rewards=self.rewards,
                              history_len=self.config.team.history_len, label=f"trained ({suite})",
                              make_agent=self.make_agent)
        return summarize(result, headline_metrics(world_class(self.config.env.name)))

    # ------------------------------------------------------------------ loop
    def run(self) -> dict[str, float]:
        """Warm up, then iterate to ``train.iterations``; return the last evaluation. On Ctrl-C the
        write in flight finishes and the resume command is printed before the interrupt goes on."""
        try:
            self.tune_roles()
            self.warm_up()
            if self.algo is None:
                self._start_rl()
            self._evaluate_start()
            return self._loop()
        except KeyboardInterrupt:
            print(f"\n{resume_hint(self.run_dir)}", file=sys.stderr, flush=True)
            raise

    def _evaluate_start(self) -> None:
        """With ``train.eval_every``, one held-out evaluation before the first update, logged as iteration
        0: the greedy play RL starts from (the behaviour clone, or the zero-shot coordinator), where the
        curves begin and what the warm-up alone reached (``teamtr report --compare``: greedy
        decisions-to-X). Once per run: a resumed run past it, or one that logged it, skips it."""
        cfg = self.config.train
        if not cfg.eval_every or not cfg.iterations or self.iteration != 0 or not self.dist.is_main:
            return
        if any(r.get("kind") == "eval" and r.get("iteration") == 0 for r in read_metrics(self.run_dir)):
            return
        self._evaluate_logged(0, "before the first update")

    def _evaluate_logged(self, iteration: int, when: str) -> dict[str, float]:
        """A held-out evaluation of ``train.eval_episodes``, logged as ``iteration``'s and said."""
        episodes = self.config.train.eval_episodes
        result = self.evaluate(episodes)
        self._log("eval", iteration, {"suite": "heldout", **{f"eval/{k}": v for k, v in result.items()}})
        say(f"eval {when}: {iteration_stats(result, prefix='')} ({episodes} held-out episodes)")
        return result

    def _loop(self) -> dict[str, float]:
        cfg = self.config.train
        progress = Progress("iteration", max(1, cfg.iterations), start=self.iteration, lines=None)
        last_eval: dict[str, float] = {}
        try:
            while self.iteration < cfg.iterations:
                it = self.iteration + 1
                line = self._iteration(it)
                if cfg.eval_every and it % cfg.eval_every == 0 and self.dist.is_main:
                    last_eval = self._evaluate_logged(it, f"at iteration {it}")
                self.iteration = it
                if it % cfg.checkpoint_every == 0 or it == cfg.iterations:
                    self.checkpoint()
                progress.update(it, iteration_stats(line))
        finally:
            progress.close()
        return last_eval

    def _log(self, kind: str, iteration: int, metrics: dict[str, Any]) -> None:
        if not self.dist.is_main:
            return
        with uninterrupted():
            self.logger.log(kind, iteration, metrics)

    def _iteration(self, it: int) -> dict[str, Any]:
        """Collect, update and log iteration ``it``; return its metrics line."""
        self.rewards.set_progress(it)
        if self.judge is not None:
            self.judge.set_progress(it)
        t0 = time.perf_counter()
        rollout, episodes, transcripts = self.collect()
        t_collect = time.perf_counter() - t0
        c = self.algo_config
        rollout.compute_advantages(c.gamma, c.lam, c.normalize_advantages, estimator=self.algo.advantage_estimator)
        t1 = time.perf_counter()
        metrics = self.update(rollout) if self.hierarchy is None else self.hierarchy.update(self, rollout, it)
        t_update = time.perf_counter() - t1
        ep = {f"episode/{k if k != 'episode_return' else 'return'}": v for k, v in _mean(episodes).items()}
        line = {**ep, **metrics, **self.collector.stats, "perf/decisions_per_s": len(rollout) / max(t_collect, 1e-9),
                "perf/collect_s": t_collect, "perf/update_s": t_update,
                "perf/iteration_s": time.perf_counter() - t0, "perf/decisions": len(rollout)}
        if self.replay is not None:
            line["replay/size"] = len(self.replay)
        if self.curriculum.stages:
            line["curriculum/stage"] = self.curriculum.stage  # the stage this iteration trained on
            if self.curriculum.record(ep["episode/success"]):
                self._restart_schedules(it)
                self._apply_stage_lr()
        self._log("train", it, line)
        self._write_transcripts(it, transcripts[: self.config.log.transcripts])
        self._check_skips(it, metrics)
        return line

    def _restart_schedules(self, done: int) -> None:
        """With ``curriculum.schedule: stage``, start the LR and entropy schedules again for the stage
        training is in after ``done`` iterations: over its ``max_iterations``, at most the iterations left
        (the configured world after the last stage: the iterations left)."""
        cur = self.config.curriculum
        if cur.schedule != "stage" or not cur.stages or self.algo is None:
            return
        left = max(1, self.config.train.iterations - done)
        stage = None if self.curriculum.finished else self.curriculum.stages[self.curriculum.stage]
        span = updates_per_level(self.config, min(left, stage.max_iterations or left) if stage else left)
        for algo in (self.algo, None if self.hierarchy is None else self.hierarchy.algo):
            if algo is not None:
                algo.restart_schedules(span)

    def _apply_stage_lr(self) -> None:
        """The policy's LR of the stage training is in: its ``lr`` (the configured world, or a stage
        without one: ``algo.lr``), as a scale on every algorithm's policy LR."""
        stage = None if self.curriculum.finished else self.curriculum.stages[self.curriculum.stage]
        scale = stage.lr / self.config.algo.lr if stage is not None and stage.lr is not None else 1.0
        for algo in (self.algo, None if self.hierarchy is None else self.hierarchy.algo):
            if algo is not None:
                algo.stage_lr_scale = scale

    def _check_skips(self, it: int, metrics: dict[str, float]) -> None:
        """Stop a run whose every update step was skipped ``SKIP_LIMIT`` iterations in a row."""
        self.skipped_in_a_row = self.skipped_in_a_row + 1 if all_steps_skipped(metrics) else 0
        if self.skipped_in_a_row >= SKIP_LIMIT:
            raise TeamTRError(
                f"iterations {it - SKIP_LIMIT + 1}-{it}: every update step was skipped (non-finite loss or gradient), "
                f"{SKIP_LIMIT} iterations in a row, so the run cannot learn. Likely causes: reward weights too large "
                "(rewards.weights.*), policy.temperature too small, or algo.lr too large; see teamtr doctor "
                f"{self.run_dir}.")

    def _write_transcripts(self, iteration: int, transcripts: list[dict[str, Any]]) -> None:
        if not self.dist.is_main:
            return
        with uninterrupted(), open(self.run_dir / TRANSCRIPTS_FILE, "a", encoding="utf-8") as f:
            for t in transcripts:
                f.write(json.dumps({"iteration": iteration, **t}) + "\n")

    def checkpoint(self) -> Path:
        """Save the checkpoint of ``self.iteration`` (a Ctrl-C meanwhile waits) and its model card; under
        torchrun rank 0 writes it (every rank holds the same weights and optimiser) and the others wait."""
        if not self.dist.is_main:
            self.dist.barrier()
            return self.run_dir / "checkpoints"
        with uninterrupted():
            path = save_checkpoint(
                self.run_dir, self.iteration, self.coordinator, self.algo,
                {"train_seed": self.seeds.next, "episode_id": self.collector.episode_id, "bc_done": self.bc_done,
                 "generator": self.collector.generator.get_state(), "curriculum": self.curriculum.state_dict(),
                 **({"replay": self.replay.state_dict()} if self.replay is not None else {}),
                 **({"roles_done": self.roles_done} if self.config.team.llm.role_adapters.enabled else {}),
                 **({"hierarchy": self.hierarchy.state_dict()} if self.hierarchy is not None else {})},
                keep=self.config.train.keep_checkpoints,
            )
            write_model_card(self.run_dir, path)
        self.dist.barrier()
        return path

    def close(self) -> None:
        """Close the logs and release the run directory's lock (idempotent)."""
        try:
            if hasattr(self, "collector"):
                self.collector.close()
            if hasattr(self, "logger"):
                self.logger.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take_back(run_dir: Path, existed: bool, before: set[str]) -> None:
    """Remove what a failed setup wrote: ``run_dir`` itself when the setup made it, else the entries
    that were not there ``before`` (the CLI may hand over an empty directory holding a lock file)."""
    import shutil

    if not existed:
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    for entry in run_dir.iterdir():
        if entry.name in before:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        raise TeamTRError("No episodes were collected; rollout.episodes must be >= 1.")
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
