"""One validated config tree: YAML file + ``--set a.b=c`` overrides; the resolved copy is saved per run.

Every section mirrors a part of the package; an unknown key or a bad value fails with a message that
names the key, the value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from teamtr.core import TeamTRError
from teamtr.policy.settings import NORMALIZATIONS, LoraSettings
from teamtr.rewards.judge import DEFAULT_CLIP, DEFAULT_RUBRIC, DEFAULT_WEIGHT, EVERY
from teamtr.rl.settings import ALGORITHM_NAMES, AlgoConfig

#: How the coordinator directs (``team.directives``); ``eval.policies.DIRECTIVE_MODES`` is this tuple.
DIRECTIVE_MODES = ("single", "whole_team", "free_text")


#: The shipped experiments, inside the package: ``--config default`` or a path to a YAML file.
CONFIGS_DIR = Path(__file__).parent / "configs"
#: Reward weights beyond this make every return overflow the value head and every step be skipped.
MAX_REWARD_WEIGHT = 1e3


class _Section(BaseModel):
    # NaN and inf are never a meaningful setting: refuse them everywhere (pydantic accepts them by default).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class EnvConfig(BaseModel):
    """``name`` plus the world's own options (``agents``, ``items``, ``names``, ``layout``...): the
    world validates those itself, naming the allowed ones."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    name: str = "escape-room"

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class RemoteConfig(_Section):
    """The OpenAI-compatible endpoint of ``remote`` role agents (``teamtr.agents.remote``)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "default"
    temperature: float = Field(0.0, ge=0)
    timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(2, ge=0)  # tries after the first, waiting backoff_s * 2**k before try k + 2
    backoff_s: float = Field(0.5, ge=0)
    concurrency: int = Field(4, ge=1)  # requests in flight at once, over all teams
    api_key_env: str = ""  # the environment variable holding the API key ("": none); the key itself never

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("must be the NAME of an environment variable (the key itself is never configured)")
        return v


class RoleAdaptersConfig(_Section):
    """A LoRA adapter per role of the ``llm`` agents on the coordinator's base model, behaviour-cloned on
    the choices of that role's scripted agent before the coordinator trains (``train/roles.py``)."""

    enabled: bool = False
    demos: int = Field(200, ge=1)  # scripted-agent choices cloned, per role
    heldout: int = Field(100, ge=1)  # held-out choices per role for the agreement before/after
    explore: float = Field(0.3, ge=0, le=1)  # share of random directives while collecting (not only the oracle's)
    epochs: int = Field(2, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    rank: int = Field(8, ge=1)  # LoRA rank r of every role adapter (alpha = 2r; modules: model.lora's)
    eval_episodes: int = Field(20, ge=0)  # held-out episodes of the oracle with untuned, then tuned agents (0: skip)


class LLMConfig(_Section):
    """Local ``llm`` role agents (``teamtr.agents.llm``)."""

    backbone: str = "same"  # same: the coordinator's backbone with its adapter disabled; or a model name
    role_prompts: dict[str, str] = {}  # agent name or role word -> who the agent is (default: from its name)
    role_adapters: RoleAdaptersConfig = RoleAdaptersConfig()


class HierarchyConfig(_Section):
    """A strategic coordinator over a tactical one (``train/hierarchy.py``, docs/directives.md)."""

    #: a strategic level picks the team's phase goal among the world's goals (``World.goals()``); the
    #: tactical level, with the goal in its prompt, directs the agents; one LoRA adapter per level
    enabled: bool = False
    every: int = Field(4, ge=1)  # the strategic level decides again after this many world ticks...
    at_milestones: bool = True  # ... and after every tactical decision that reached a milestone
    #: joint: both levels' adapters are updated every iteration; alternate: the tactical level on odd
    #: iterations, the strategic one on even ones
    training: Literal["joint", "alternate"] = "joint"


class TeamConfig(_Section):
    history_len: int = Field(3, ge=0)
    #: single: one directive per decision from the enumerated candidates; whole_team: one line per
    #: agent in one output, decoded under the state's grammar (policy/whole_team.py); free_text: text
    #: over the whole vocabulary, parsed onto that grammar (policy/free_text.py). The last two train
    #: with token-level PPO. A curriculum stage may set another mode (curriculum.stages[i].team).
    directives: Literal[DIRECTIVE_MODES] = "single"  # type: ignore[valid-type]
    # agent name, role word ("engineer") or "default" -> kind; names are checked against the world
    agents: dict[str, Literal["scripted", "llm", "remote"]] = {}
    remote: RemoteConfig = RemoteConfig()
    llm: LLMConfig = LLMConfig()
    hierarchy: HierarchyConfig = HierarchyConfig()

    @model_validator(mode="after")
    def _role_adapters(self) -> "TeamConfig":
        if not self.llm.role_adapters.enabled:
            return self
        if "llm" not in self.agents.values():
            raise ValueError("team.llm.role_adapters.enabled is true but no role agent is an llm agent: set "
                             "team.agents.default=llm (or name the agents), or team.llm.role_adapters.enabled=false")
        if self.llm.backbone != "same":
            raise ValueError(f"team.llm.role_adapters live on the coordinator's base model, but llm.backbone is "
                             f"{self.llm.backbone!r}: set team.llm.backbone=same, or team.llm.role_adapters.enabled=false")
        return self


class ModelConfig(_Section):
    backbone: str = "smollm2-135m-instruct"
    device: str = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bf16 only where it runs natively
    train_layers: int | Literal["all"] = "all"  # decoder layers carrying LoRA (behaviour cloning trains them all)
    rl_layers: int | Literal["all"] = "all"  # top layers RL updates; below them activations are cached
    value_grad_to_trunk: bool = False  # let the value loss move the adapter too
    layer_lr_decay: float = Field(1.0, gt=0, le=1)  # lr of layer i = lr * decay^(layers above i)
    lora: LoraSettings = LoraSettings()  # rank, alpha, dropout, target_modules (policy/settings.py)
    #: start from this adapter (a run directory, a checkpoint folder or a run's bc/ folder) instead of
    #: fresh LoRA weights; with bc.enabled false it is the warm start (algo.ref=bc measures KL against it)
    init: str | None = None

    @field_validator("lora", mode="before")
    @classmethod
    def _lora(cls, v: Any) -> Any:
        """Built by ``LoraSettings`` itself, so its fields and ranges are declared once, there."""
        if not isinstance(v, dict):
            return v
        known = [f.name for f in fields(LoraSettings)]
        unknown = [k for k in v if k not in known]
        if unknown:
            raise ValueError(f"unknown LoRA setting {unknown[0]!r}; known: {', '.join(known)}")
        return LoraSettings(**v)


class PolicyConfig(_Section):
    normalization: Literal[NORMALIZATIONS] = "token"  # type: ignore[valid-type]
    # Below 1e-3 the tempered scores (log-probs of -1..-100) overflow float32 in the softmax.
    temperature: float = Field(1.0, ge=1e-3, le=1e3)
    #: training only: the probability of swapping one entity (agent or object) of each chosen directive
    #: for another valid one (train/noise.py); PPO learns from the directive executed
    noise: float = Field(0.0, ge=0, le=1)
    #: free-text directives: the most tokens the coordinator writes per decision (the end marker
    #: included); a text cut there is parsed as it stands
    max_new_tokens: int = Field(48, ge=1, le=1024)


class AlgoSection(BaseModel):
    """``name`` and ``ref`` plus every ``teamtr.rl.AlgoConfig`` field (validated there)."""

    model_config = ConfigDict(extra="allow")
    name: Literal[ALGORITHM_NAMES] = "ppo"  # type: ignore[valid-type]
    ref: Literal["base", "bc"] = "base"  # reference policy of the KL penalty
    # Replay of successes (train/replay.py): an imitation term on successful episodes' decisions in
    # every PPO/PG step; replay_coef 0 keeps no buffer.
    replay_coef: float = Field(0.0, ge=0, allow_inf_nan=False)  # weight of the replayed decisions' NLL
    replay_capacity: int = Field(64, ge=1)  # successful episodes kept, highest return first
    replay_alpha: float = Field(1.0, ge=0, allow_inf_nan=False)  # rank priority exponent (0: uniform)
    replay_batch: int = Field(16, ge=1)  # replayed decisions per optimiser step
    token_level: bool = True  # whole-team mode: a PPO ratio per token (false: one per decision)

    def algo_options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class JudgeConfig(_Section):
    """The LLM-judge reward term (``rewards/judge.py``); its start iteration is ``start_iteration.judge``."""

    enabled: bool = False
    rubric: str = Field(DEFAULT_RUBRIC, min_length=1)
    weight: float = Field(DEFAULT_WEIGHT, ge=-MAX_REWARD_WEIGHT, le=MAX_REWARD_WEIGHT)
    every: Literal[EVERY] = "decision"  # type: ignore[valid-type]  # judge every decision's outcome, or the final state
    #: same: the coordinator's backbone with its adapter off; an http(s):// OpenAI-compatible API base
    #: (its key from $OPENAI_API_KEY, never from here); else a backbone name to load
    backbone: str = "same"
    remote_model: str = "default"  # the model name a remote judge endpoint expects
    clip: float = Field(DEFAULT_CLIP, gt=0)  # bound of the judge's log-odds before weighting


class RewardsConfig(_Section):
    weights: dict[str, float] = {}
    #: term -> iteration from which it counts (the seed's "sparse first, dense later"); ``judge`` too
    start_iteration: dict[str, int] = {}
    judge: JudgeConfig = JudgeConfig()

    @field_validator("weights")
    @classmethod
    def _bounded(cls, v: dict[str, float]) -> dict[str, float]:
        for term, w in v.items():
            if abs(w) > MAX_REWARD_WEIGHT:
                raise ValueError(f"weight {term}={w:g} is beyond +-{MAX_REWARD_WEIGHT:g}: returns that large overflow "
                                 "the value head and every update step is skipped; scale the weights down")
        return v

    @field_validator("start_iteration")
    @classmethod
    def _not_negative(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: i for k, i in v.items() if i < 0}
        if bad:
            raise ValueError(f"iterations must be >= 0, got {bad}")
        return v

    def composer(self) -> Any:
        """The ``RewardComposer`` these weights describe (it validates the term names)."""
        from teamtr.rewards.terms import RewardComposer

        schedule = {term: i for term, i in self.start_iteration.items() if term != "judge"}
        return RewardComposer(self.weights or None, schedule=schedule or None)


def default_reward_weight(term: str) -> float | None:
    """The weight a reward term has when ``rewards.weights`` leaves it out (None: no such term)."""
    from teamtr.rewards.terms import DEFAULT_WEIGHTS

    return DEFAULT_WEIGHTS.get(term)


class RolloutConfig(_Section):
    episodes: int = Field(16, ge=1)  # episodes per iteration
    parallel: int = Field(16, ge=1)  # teams stepped as one batch (one scoring call per tick)
    #: episodes per world seed: the group a critic-free baseline (algo.name grpo, rloo) compares
    #: within; 1 gives every episode its own seed
    group_size: int = Field(1, ge=1)
    #: where teams step: in this process (inline), or in Ray actors (ray; pip install 'teamtr[ray]';
    #: docs/scaling.md); the coordinator scores every live state in one call either way
    backend: Literal["inline", "ray"] = "inline"
    workers: int = Field(2, ge=1)  # ray: actors, each holding a slice of the batch's teams
    #: ray: every tick waits for every worker (the same numbers as inline); false: a tick scores the
    #: workers that have answered, so a slow world stalls only its own teams
    lockstep: bool = True
    ray_address: str | None = None  # ray: None starts a local Ray; "auto" joins the cluster of `ray start`


def _world_options(cls: type, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """Options over a world's (``train.eval_env``, ``bc.dagger_env``): never another world."""
    if "name" in v:
        raise ValueError(f"{info.field_name} changes the world's options, not env.name")
    return v


class BCConfig(_Section):
    enabled: bool = True
    demos: int = Field(240, ge=0)  # expert decisions to collect from the world's oracle
    explore: float = Field(0.2, ge=0, le=1)  # share of off-expert steps while collecting (states off the expert path)
    files: list[str] = []  # trajectory JSONL files (the trainer's transcripts format) to clone too
    success_weighted: bool = False  # sample successful episodes' decisions more (prioritised replay)
    #: draw demonstrations labelled "no new directive" this much more or less often than the others: below
    #: 1 where the expert mostly says nothing and its few directives carry the coordination (Overcooked)
    noop_weight: float = Field(1.0, gt=0)
    epochs: int = Field(2, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(2e-3, gt=0)
    #: constant: bc.lr throughout; cosine: linear warmup over the first tenth of the steps, then cosine
    #: decay to 0 at the last step, so the clone ends where its steps settled, not mid-stride
    schedule: Literal["constant", "cosine"] = "constant"
    #: DAgger (Ross et al. 2011) after the first clone: this many rounds in which the clone acts greedily,
    #: the oracle labels every state it reaches, and the clone is trained again on all demonstrations
    #: (each round epochs x its new decisions / batch_size steps); 0: the plain clone
    dagger_rounds: int = Field(0, ge=0)
    dagger_demos: int | None = Field(None, ge=1)  # decisions collected per round; None: as many as bc.demos
    dagger_epochs: int | None = Field(None, ge=1)  # epochs over each round's new decisions; None: bc.epochs
    #: world options over the training world's for the rounds' episodes, e.g. {horizon: 400} where the
    #: clone's failures come late in the task and training episodes are cut short (Overcooked)
    dagger_env: dict[str, Any] = {}
    _dagger_env = field_validator("dagger_env")(_world_options)


class TrainConfig(_Section):
    iterations: int = Field(10, ge=0)
    eval_every: int = Field(5, ge=0)  # held-out greedy eval every N iterations and before the first (iteration 0); 0: at the end only
    eval_episodes: int = Field(32, ge=1)
    checkpoint_every: int = Field(5, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    final_eval_episodes: int = Field(200, ge=0)  # held-out seeds for the end-of-run table
    final_zero_shot_episodes: int = Field(50, ge=0)  # zero-shot fails every episode at full length: the priciest row
    #: the bc row (the warm start alone, for runs that clone or start from model.init): None = as many as
    #: final_eval_episodes; 0 skips it, e.g. in a sweep whose runs share one warm start evaluated once
    final_bc_episodes: int | None = Field(None, ge=0)
    eval_seed_offset: int = Field(1_000_000, ge=1)  # held-out seeds start here; training seeds below
    #: world options over env's for every evaluation (periodic and final), e.g. {horizon: 400} while
    #: training episodes are shorter: the table measures the task itself
    eval_env: dict[str, Any] = {}
    #: the end-of-run table's suites (eval/suites.py): heldout, or generalisation (one agent more,
    #: held-out names, layouts not trained on, as far as the world declares them)
    final_suite: Literal["heldout", "generalisation"] = "heldout"
    #: baseline rows of the end-of-run table besides trained and zero-shot; oracle is the world's
    #: expert (shown as heuristic where the world says so)
    final_baselines: list[Literal["random", "first", "noop", "oracle", "heuristic"]] = ["random", "oracle"]
    _eval_env = field_validator("eval_env")(_world_options)


class StageTeam(_Section):
    """What a curriculum stage changes of ``team``: how the coordinator directs (the seed's "grow the
    action complexity": single, then whole_team, then free_text); None keeps ``team.directives``."""

    directives: Literal[DIRECTIVE_MODES] | None = None  # type: ignore[valid-type]


class CurriculumStage(_Section):
    """One easier stage before ``env`` and ``team`` themselves: option overrides and when to move on."""

    env: dict[str, Any] = {}  # world options for this stage, over env's (e.g. {agents: 2, items: 2})
    team: StageTeam = StageTeam()  # e.g. {directives: whole_team} before team.directives=free_text
    success: float | None = Field(None, gt=0, le=1)  # move on once training success, averaged over
    window: int = Field(2, ge=1)  # ... the last `window` iterations of this stage, reaches `success`
    max_iterations: int | None = Field(None, ge=1)  # move on after this many iterations at the latest
    #: the policy's learning rate while training in this stage (None: algo.lr), under the same warmup and
    #: cosine (algo.min_lr_ratio); the value head keeps algo.value_lr. E.g. a larger step in an easy first
    #: stage and algo.lr, smaller, in the configured world
    lr: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _ends(self) -> "CurriculumStage":
        if self.success is None and self.max_iterations is None:
            raise ValueError("a curriculum stage needs `success` or `max_iterations` (else it never ends; the "
                             "configured env and team.directives come after the last stage)")
        if "name" in self.env:
            raise ValueError("a curriculum stage changes the world's options, not env.name")
        return self


class CurriculumConfig(_Section):
    #: easier worlds (or simpler directive modes) trained on before ``env`` and ``team.directives``
    #: themselves (the seed's "curriculum learning"); evaluation always uses those. Empty: no curriculum.
    stages: list[CurriculumStage] = []
    #: run: the LR warmup + cosine and the entropy decay span the whole run (``train.iterations``), so a
    #: stage that begins late trains at a decayed LR; stage: they start again as each stage begins, over
    #: its ``max_iterations`` (at most the iterations left), and over the iterations left for the
    #: configured world after the last stage
    schedule: Literal["run", "stage"] = "run"


class LogConfig(_Section):
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "teamtr"
    transcripts: int = Field(2, ge=0)  # sample episodes written per evaluation


class Config(_Section):
    seed: int = 0
    run_dir: str = "runs/default"
    env: EnvConfig = EnvConfig()
    team: TeamConfig = TeamConfig()
    model: ModelConfig = ModelConfig()
    policy: PolicyConfig = PolicyConfig()
    algo: AlgoSection = AlgoSection()
    rewards: RewardsConfig = RewardsConfig()
    rollout: RolloutConfig = RolloutConfig()
    bc: BCConfig = BCConfig()
    train: TrainConfig = TrainConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    log: LogConfig = LogConfig()

    @field_validator("run_dir")
    @classmethod
    def _run_dir(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("run_dir is empty")
        return v


class _Loader(yaml.SafeLoader):
    """YAML with YAML 1.2 floats: PyYAML (YAML 1.1) reads ``5e-4`` or ``1e3`` as strings, and a
    learning rate written that way would then fail validation."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"""),
    list("-+0123456789."),
)


def load_yaml(text: str, where: str = "YAML") -> Any:
    """Parse ``text``; a syntax error names ``where``, the line and column, and the usual cause."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        hint = "; YAML indents with spaces, never tabs" if "\t" in text else ""
        raise TeamTRError(f"{where} is not valid YAML{at}: {problem}{hint}.") from None


def _parse_value(text: str) -> Any:
    return load_yaml(text, f"--set value {text!r}") if text.strip() else ""


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``a.b=c`` strings set nested keys (values parsed as YAML: numbers, booleans, lists)."""
    for item in overrides:
        if "=" not in item:
            raise TeamTRError(f"--set {item!r} is not of the form key.path=value (e.g. algo.clip_eps=0.1).")
        path, value = item.split("=", 1)
        keys = path.strip().split(".")
        node = tree
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise TeamTRError(f"--set {item!r}: {k!r} is a value, not a section.")
        node[keys[-1]] = _parse_value(value)
    return tree


def _explain(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown config key {key!r} (value {value!r}); `teamtr config show` lists every key")
        else:
            lines.append(f"config key {key!r} = {value!r}: {e['msg']}")
    return "Bad config: " + "; ".join(lines)


def _check_groups(config: Config) -> None:
    """Critic-free algorithms compare episodes of one world seed: they need whole groups of >= 2."""
    size, episodes = config.rollout.group_size, config.rollout.episodes
    if config.algo.name in ("grpo", "rloo") and size < 2:
        raise TeamTRError(f"Bad config: algo.name={config.algo.name} compares each episode with the others of "
                          "its world seed: set rollout.group_size to 2 or more (e.g. 4).")
    for key in ("episodes", "parallel"):
        value = getattr(config.rollout, key)
        if value % size:
            raise TeamTRError(f"Bad config: rollout.{key}={value} is not a multiple of rollout.group_size={size}; "
                              "every world seed runs group_size episodes, side by side.")


def directive_modes(config: Config) -> list[str]:
    """Every ``team.directives`` mode a run trains in: its curriculum stages' and its own."""
    staged = [s.team.directives for s in config.curriculum.stages if s.team.directives is not None]
    return list(dict.fromkeys([*staged, config.team.directives]))


def _check_modes(config: Config) -> None:
    """Whole-team and free-text directives train with token-level PPO, against a reference that exists."""
    token = [m for m in directive_modes(config) if m != "single"]
    if not token:
        return
    if config.algo.name != "ppo":
        raise TeamTRError(f"Bad config: team.directives={token[0]} (here or in a curriculum stage) trains with "
                          f"token-level PPO; algo.name={config.algo.name!r} is not supported there: set algo.name=ppo.")
    if config.algo.ref == "bc" and not config.bc.enabled and not config.model.init:
        raise TeamTRError(f"Bad config: algo.ref=bc with team.directives={token[0]} needs the behaviour-cloned "
                          "adapter (or a warm start), but bc.enabled is false and model.init is unset: set one of "
                          "bc.enabled=true; model.init=RUN (its adapter is then the reference); algo.ref=base.")


def _check_micro_batches(config: Config) -> None:
    """``algo.micro_batch_size`` splits the gradient pass of the candidate-level PPO family only."""
    micro = config.algo.algo_options().get("micro_batch_size")
    if micro is None:
        return
    token = [m for m in directive_modes(config) if m != "single"]
    where = (f"team.directives={token[0]} (token-level PPO)" if token
             else "algo.name=trpo (its Fisher products use algo.fisher_batch_size)" if config.algo.name == "trpo"
             else None)
    if where:
        raise TeamTRError(f"Bad config: algo.micro_batch_size={micro} splits the "
                          f"gradient pass of ppo, pg, grpo and rloo on candidates; {where} does not use it: "
                          "remove it (lower algo.minibatch_size to save memory there).")


def _check_stage_lr(config: Config) -> None:
    """A stage's ``lr`` scales the policy's optimiser step; TRPO takes no such step (its size is algo.max_kl)."""
    staged = [i for i, s in enumerate(config.curriculum.stages) if s.lr is not None]
    if staged and config.algo.name == "trpo":
        raise TeamTRError(f"Bad config: curriculum.stages[{staged[0]}].lr sets a learning rate, but algo.name=trpo "
                          "sizes its policy step by algo.max_kl, not a learning rate: remove the stage's lr.")


def _check_hierarchy(config: Config) -> None:
    """The settings ``team.hierarchy.enabled`` runs with (each refusal names the key and the fix)."""
    if not config.team.hierarchy.enabled:
        return
    m, why = config.model, None
    if config.team.directives != "single":
        why = "team.directives must be single (whole-team outputs under a goal are not built yet)"
    elif config.algo.name not in ("ppo", "pg"):
        why = f"algo.name={config.algo.name} is not supported there: each level learns from GAE; use ppo or pg"
    elif config.algo.ref == "bc":
        why = "algo.ref=bc names one adapter, and a hierarchical run has two: set algo.ref=base"
    elif config.bc.enabled and config.bc.files:
        why = "bc.files carry no phase goals: clone from the oracle (bc.demos) alone"
    elif m.rl_layers != "all" and m.rl_layers != m.train_layers:
        why = (f"model.rl_layers={m.rl_layers} caches activations under one adapter; set it to all or to "
               f"model.train_layers ({m.train_layers})")
    elif config.rollout.backend != "inline":
        why = "rollout.backend must be inline"
    if why:
        raise TeamTRError(f"Bad config: team.hierarchy.enabled=true: {why}.")


def _check_dagger(config: Config) -> None:
    """DAgger's rounds clone single decisions: the mode training starts in must be single."""
    if not (config.bc.enabled and config.bc.dagger_rounds):
        return
    stages = config.curriculum.stages
    first = stages[0].team.directives if stages and stages[0].team.directives is not None else None
    mode = first or config.team.directives
    if mode != "single":
        raise TeamTRError(f"Bad config: bc.dagger_rounds={config.bc.dagger_rounds} needs single directives where "
                          f"training starts, but it starts in team.directives={mode}: the clone's own whole-team "
                          "outputs are not collected yet; set bc.dagger_rounds=0 or start in single mode.")
    if not config.bc.demos and config.bc.dagger_demos is None:
        raise TeamTRError("Bad config: bc.dagger_rounds needs a number of decisions per round: set bc.dagger_demos "
                          "(bc.demos is 0).")


def validate(tree: dict[str, Any]) -> Config:
    try:
        config = Config.model_validate(tree)
    except ValidationError as err:
        raise TeamTRError(_explain(err)) from None
    _check_groups(config)
    _check_modes(config)
    _check_micro_batches(config)
    _check_stage_lr(config)
    _check_hierarchy(config)
    _check_dagger(config)
    # Validate the algorithm's own keys now, not at the first update.
    try:
        AlgoConfig.from_dict(config.algo.algo_options())
    except (ValueError, TypeError) as err:
        raise TeamTRError(f"Bad config: algo: {err}") from None
    return config


def shipped_configs() -> list[str]:
    """Names of the configs shipped inside the package (``--config NAME``)."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def config_path(name_or_path: str | Path) -> Path:
    """A YAML file path, or the shipped config called ``name_or_path`` (``default``, ``escape_room_ppo``)."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    shipped = CONFIGS_DIR / f"{p.name.removesuffix('.yaml')}.yaml"
    if p.parent == Path(".") or str(p).startswith("configs/"):
        if shipped.is_file():
            return shipped
    raise TeamTRError(f"Config {str(name_or_path)!r} is neither a file nor a shipped config; shipped: "
                      f"{', '.join(shipped_configs())} (`teamtr config show NAME` prints one).")


def read_config_tree(path: str | Path | None, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The raw mapping of a config file (or ``{}`` for ``None``), errors named for people. A file may
    start from another: ``base: NAME`` (a shipped config, or a YAML path relative to the file) is read
    first and the file's own keys go over it (``merge_trees``)."""
    if path is None:
        return {}
    p = config_path(path)
    if p.resolve() in _chain:
        cycle = " -> ".join(str(x) for x in (*_chain, p.resolve()))
        raise TeamTRError(f"Config {p}: its `base` chain comes back to itself ({cycle}); remove one `base`.")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TeamTRError(f"Config file {p} cannot be read: {err}.") from None
    tree = load_yaml(text, f"Config file {p}") or {}
    if not isinstance(tree, dict):
        raise TeamTRError(f"Config file {p} must hold a mapping of sections (seed, env, model, ...).")
    if "base" not in tree:
        return tree
    base = tree.pop("base")
    if not isinstance(base, str) or not base.strip():
        raise TeamTRError(f"Config file {p}: `base` must name one config (a shipped name such as "
                          f"escape_room_ppo, or a YAML path), got {base!r}.")
    tree.setdefault("run_dir", f"runs/{p.stem}")  # not the base's: a variant's runs must not land there
    return merge_trees(read_config_tree(_base_path(p, base), (*_chain, p.resolve())), tree)


def _base_path(config: Path, base: str) -> Path:
    """``base`` of the file ``config``: a path (with a ``/`` or ending ``.yaml``) is read beside the
    file, a bare name is a shipped config; either missing is refused naming the file that asked."""
    if "/" in base or base.endswith((".yaml", ".yml")):
        path = (config.parent / base).expanduser()
        if path.is_file():
            return path
        raise TeamTRError(f"Config file {config}: base {base!r} is not a file beside it ({path}).")
    shipped = CONFIGS_DIR / f"{base}.yaml"
    if shipped.is_file():
        return shipped
    raise TeamTRError(f"Config file {config}: base {base!r} is not a shipped config; shipped: "
                      f"{', '.join(shipped_configs())} (a file beside it is named with .yaml).")


def merge_trees(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: mappings merge key by key, anything else (lists included) replaces.
    An ``env`` that names another world starts afresh (its options belong to its own world)."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        switched = key == "env" and isinstance(old, dict) and isinstance(value, dict) and \
            "name" in value and value["name"] != old.get("name", EnvConfig().name)
        if isinstance(old, dict) and isinstance(value, dict) and not switched:
            out[key] = merge_trees(old, value)
        else:
            out[key] = value
    return out


def _switch_world(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """An override ``env.name=OTHER`` starts ``env`` afresh: the file's options belong to its own
    world (escape-room's ``items`` mean nothing to software-team); ``env.*`` overrides still apply."""
    names = [item.split("=", 1)[1].strip() for item in overrides if item.split("=", 1)[0].strip() == "env.name"]
    env = tree.get("env")
    if names and isinstance(env, dict) and env.get("name", EnvConfig().name) != _parse_value(names[-1]):
        tree = {**tree, "env": {}}
    return tree


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """``path`` (a file or a shipped config name; ``None``: the defaults) with ``key.path=value`` overrides."""
    overrides = list(overrides or [])
    return validate(apply_overrides(_switch_world(read_config_tree(path), overrides), overrides))


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
