"""One validated config tree: YAML file + ``--set a.b=c`` overrides; the resolved copy is saved per run.

Every section mirrors a part of the package; an unknown key or a bad value fails with a message that
names the key, the value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from teamtr.core import TeamTRError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EnvConfig(BaseModel):
    """``name`` plus the world's own options (``agents``, ``items``, ``names``, ``layout``...): the
    world validates those itself, naming the allowed ones."""

    model_config = ConfigDict(extra="allow")
    name: str = "escape-room"

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TeamConfig(_Section):
    history_len: int = Field(3, ge=0)


class LoraConfig(_Section):
    rank: int = Field(8, ge=1)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class ModelConfig(_Section):
    backbone: str = "smollm2-135m-instruct"
    device: str = "auto"
    dtype: str = "auto"
    train_layers: int | Literal["all"] = "all"  # decoder layers carrying LoRA (behaviour cloning trains them all)
    rl_layers: int | Literal["all"] = "all"  # top layers RL updates; below them activations are cached
    value_grad_to_trunk: bool = False  # let the value loss move the adapter too
    layer_lr_decay: float = Field(1.0, gt=0, le=1)  # lr of layer i = lr * decay^(layers above i)
    lora: LoraConfig = LoraConfig()


class PolicyConfig(_Section):
    normalization: Literal["sum", "token", "word"] = "token"
    temperature: float = Field(1.0, gt=0)


class AlgoSection(BaseModel):
    """``name`` and ``ref`` plus every ``teamtr.rl.AlgoConfig`` field (validated there)."""

    model_config = ConfigDict(extra="allow")
    name: Literal["ppo", "trpo", "pg"] = "ppo"
    ref: Literal["base", "bc"] = "base"  # reference policy of the KL penalty

    def algo_options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class RewardsConfig(_Section):
    weights: dict[str, float] = {}
    #: term -> iteration from which it counts (the seed's "sparse first, dense later")
    start_iteration: dict[str, int] = {}

    def composer(self) -> Any:
        """The ``RewardComposer`` these weights describe (it validates the term names)."""
        from teamtr.rewards.terms import RewardComposer

        return RewardComposer(self.weights or None, schedule=self.start_iteration or None)


class RolloutConfig(_Section):
    episodes: int = Field(16, ge=1)  # episodes per iteration
    parallel: int = Field(16, ge=1)  # teams stepped as one batch (one scoring call per tick)


class BCConfig(_Section):
    enabled: bool = True
    demos: int = Field(240, ge=0)  # expert decisions to collect from the world's oracle
    explore: float = Field(0.2, ge=0, le=1)  # share of off-expert steps while collecting (states off the expert path)
    files: list[str] = []  # trajectory JSONL files (the trainer's transcripts format) to clone too
    success_weighted: bool = False  # sample successful episodes' decisions more (prioritised replay)
    epochs: int = Field(2, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(2e-3, gt=0)


class TrainConfig(_Section):
    iterations: int = Field(10, ge=0)
    eval_every: int = Field(5, ge=0)  # 0: only at the end
    eval_episodes: int = Field(32, ge=1)
    checkpoint_every: int = Field(5, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    final_eval_episodes: int = Field(200, ge=0)  # held-out seeds for the end-of-run table
    final_zero_shot_episodes: int = Field(50, ge=0)  # zero-shot fails every episode at full length: the priciest row
    eval_seed_offset: int = Field(1_000_000, ge=0)  # held-out seeds start here; training seeds below


class CurriculumStage(_Section):
    """One easier world before ``env``: its option overrides and when to move on."""

    env: dict[str, Any] = {}  # world options for this stage, over env's (e.g. {agents: 2, items: 2})
    success: float | None = Field(None, gt=0, le=1)  # move on once training success, averaged over
    window: int = Field(2, ge=1)  # ... the last `window` iterations of this stage, reaches `success`
    max_iterations: int | None = Field(None, ge=1)  # move on after this many iterations at the latest

    @model_validator(mode="after")
    def _ends(self) -> "CurriculumStage":
        if self.success is None and self.max_iterations is None:
            raise ValueError("a curriculum stage needs `success` or `max_iterations` (else it never ends)")
        if "name" in self.env:
            raise ValueError("a curriculum stage changes the world's options, not env.name")
        return self


class CurriculumConfig(_Section):
    #: easier worlds trained on before ``env`` itself (the seed's "curriculum learning"); evaluation
    #: always uses ``env``. Empty: no curriculum.
    stages: list[CurriculumStage] = []


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


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


def _parse_value(text: str) -> Any:
    return load_yaml(text) if text.strip() else ""


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
            lines.append(f"unknown config key {key!r} (value {value!r}); check the spelling against configs/default.yaml")
        else:
            lines.append(f"config key {key!r} = {value!r}: {e['msg']}")
    return "Bad config: " + "; ".join(lines)


def validate(tree: dict[str, Any]) -> Config:
    try:
        config = Config.model_validate(tree)
    except ValidationError as err:
        raise TeamTRError(_explain(err)) from None
    # Validate the algorithm's own keys now, not at the first update.
    from teamtr.rl import AlgoConfig

    try:
        AlgoConfig.from_dict(config.algo.algo_options())
    except (ValueError, TypeError) as err:
        raise TeamTRError(f"Bad config: algo: {err}") from None
    return config


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise TeamTRError(f"Config file {p} does not exist; see configs/ for the shipped ones.")
        tree = load_yaml(p.read_text()) or {}
        if not isinstance(tree, dict):
            raise TeamTRError(f"Config file {p} must hold a mapping of sections (seed, env, model, ...).")
    return validate(apply_overrides(tree, overrides or []))


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
