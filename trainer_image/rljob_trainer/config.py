"""The trainer's configuration: an OmegaConf structured config of nested dataclasses.

Precedence, lowest first: the dataclass defaults, the YAML file, the environment variables the
operator injects (see `rljob_contract`), then dotted command-line overrides such as
`runner.save_interval=50` (OmegaConf's dotlist, as RLinf and verl take theirs). OmegaConf
checks keys and types against the dataclasses; every section checks its ranges in
`__post_init__`. A bad value fails at start-up with a message naming the key instead of hours
into a run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, cast

import rljob_contract as contract
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

DEFAULT_CONFIG = "grpo_tiny.yaml"

# Environment variable -> dotted config key it overrides.
ENV_OVERRIDES: dict[str, str] = {
    contract.ENV_CHECKPOINT_DIR: "runner.checkpoint_dir",
    contract.ENV_SAVE_INTERVAL: "runner.save_interval",
    contract.ENV_MAX_TO_KEEP: "runner.max_num_checkpoints",
    contract.ENV_RESUME_DIR: "runner.resume_dir",
    contract.ENV_CHECKPOINT_REQUEST_FILE: "runner.checkpoint_request_file",
    contract.ENV_BACKEND: "runner.backend",
    contract.ENV_GRACE_SECONDS: "runner.grace_seconds",
}


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass
class RunnerConfig:
    """Where a run writes, how often it checkpoints, and how it resumes."""

    output_dir: str = "outputs"
    """Root folder; a run writes under `<output_dir>/<experiment_name>/`."""
    experiment_name: str = "grpo_tiny"
    """Names the run's folder under `output_dir`."""
    checkpoint_dir: str | None = None
    """Folder holding the `global_step_N` folders and progress.json.
    Default `<output_dir>/<experiment_name>/checkpoints` (set by load_config); env
    RLJOB_CHECKPOINT_DIR."""
    save_interval: int = 10
    """Checkpoint every this many steps (and always at the last step); env RLJOB_SAVE_INTERVAL."""
    max_steps: int = 200
    """Number of GRPO steps (rollout + update) of the whole run, across restarts."""
    resume_dir: str | None = None
    """A complete `global_step_N` folder to resume from; env RLJOB_RESUME_DIR. Wins over
    auto_resume."""
    auto_resume: bool = True
    """Without resume_dir, resume from the newest complete checkpoint in checkpoint_dir, so a
    restarted job with identical arguments continues where it stopped."""
    max_num_checkpoints: int = 3
    """Keep this many newest complete checkpoints; 0 keeps all. Env RLJOB_MAX_TO_KEEP."""
    seed: int = 1234
    """Seeds the model initialisation, the data order and every rank's random generators."""
    async_save: bool = False
    """Write checkpoints with `dcp.async_save` while training goes on (one save in flight).
    FSDP only."""
    save_full_model: bool = True
    """Also gather the full model into `actor/model/` (safetensors + config.json) at each save.
    FSDP only: a Megatron checkpoint becomes safetensors with `rljob ckpt convert`."""
    allow_world_size_change: bool = False
    """Resume a checkpoint written by a different number of ranks: model and optimizer are
    re-sharded, per-rank random state is reseeded, so the run is no longer bit-exact."""
    checkpoint_request_file: str | None = None
    """Polled every step; non-empty means: checkpoint now and exit 75.
    Env RLJOB_CHECKPOINT_REQUEST_FILE."""
    grace_seconds: float | None = None
    """Seconds from a notice (SIGTERM or a checkpoint request) until the pod is killed: the
    pod's grace period, env RLJOB_GRACE_SECONDS. With it, a notice during a rollout that would
    end too late saves the last finished step at once; without it, the step always finishes."""
    backend: str = "fsdp"
    """`fsdp` (rljob's TransformerLM on FSDP2, DCP checkpoints) or `megatron` (megatron-core's
    GPTModel with tensor, pipeline and data parallelism, dist_checkpointing); env RLJOB_BACKEND."""
    device: str = "auto"
    """`auto` (CUDA when available, else CPU), `cpu` or `cuda`."""
    deterministic: bool = True
    """Use deterministic kernels, required for bit-exact resume."""

    def __post_init__(self) -> None:
        _require(bool(self.output_dir), "runner.output_dir must not be empty")
        _require(bool(self.experiment_name), "runner.experiment_name must not be empty")
        _require(
            self.save_interval >= 1, f"runner.save_interval must be >= 1, got {self.save_interval}"
        )
        _require(self.max_steps >= 1, f"runner.max_steps must be >= 1, got {self.max_steps}")
        _require(
            self.max_num_checkpoints >= 0,
            "runner.max_num_checkpoints must be >= 0 (0 keeps all), "
            f"got {self.max_num_checkpoints}",
        )
        _require(self.seed >= 0, f"runner.seed must be >= 0, got {self.seed}")
        _require(
            self.grace_seconds is None or self.grace_seconds >= 0,
            f"runner.grace_seconds must be >= 0, got {self.grace_seconds}",
        )
        _require(
            self.backend in contract.BACKENDS,
            f"runner.backend must be one of {', '.join(contract.BACKENDS)}; got {self.backend!r}",
        )
        _require(
            not (self.async_save and self.backend == "megatron"),
            "runner.async_save is not supported with runner.backend=megatron: its saves are "
            "synchronous",
        )
        _require(
            self.device in ("auto", "cpu", "cuda"),
            f"runner.device must be one of auto, cpu, cuda; got {self.device!r}",
        )

    @property
    def experiment_dir(self) -> str:
        return str(Path(self.output_dir) / self.experiment_name)


@dataclass
class ModelConfig:
    """A decoder-only transformer; the vocabulary comes from the task's tokenizer."""

    n_layers: int = 2
    """Number of transformer blocks."""
    d_model: int = 64
    """Width of the residual stream."""
    n_heads: int = 4
    """Attention heads; must divide d_model."""
    d_ff: int = 256
    """Hidden width of each block's MLP."""
    max_seq_len: int = 16
    """Longest prompt + completion the position embedding covers."""
    norm: str = "rmsnorm"
    """`rmsnorm` or `layernorm`."""
    tie_embeddings: bool = True
    """Use the token embedding as the output head."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation of linear and embedding weights."""

    def __post_init__(self) -> None:
        _require(self.n_layers >= 1, f"model.n_layers must be >= 1, got {self.n_layers}")
        _require(self.n_heads >= 1, f"model.n_heads must be >= 1, got {self.n_heads}")
        _require(
            self.d_model >= 1 and self.d_model % self.n_heads == 0,
            f"model.d_model ({self.d_model}) must be a positive multiple of model.n_heads "
            f"({self.n_heads})",
        )
        _require(self.d_ff >= 1, f"model.d_ff must be >= 1, got {self.d_ff}")
        _require(self.max_seq_len >= 2, f"model.max_seq_len must be >= 2, got {self.max_seq_len}")
        _require(
            self.norm in ("rmsnorm", "layernorm"),
            f"model.norm must be rmsnorm or layernorm, got {self.norm!r}",
        )
        _require(self.init_std > 0, f"model.init_std must be > 0, got {self.init_std}")


@dataclass
class AlgorithmConfig:
    """GRPO: group sampling, group-normalised advantages, clipped ratio loss, KL to a reference."""

    group_size: int = 8
    """Completions sampled per prompt; advantages are normalised within each group."""
    clip_ratio: float = 0.2
    """PPO clip range of the probability ratio against the sampling-time policy."""
    kl_coef: float = 0.02
    """Weight of the KL penalty to the frozen initial policy; 0 skips the reference model."""
    lr: float = 1e-3
    """Peak learning rate of AdamW."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 5
    """Linear learning-rate warm-up, in steps; constant afterwards."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this value."""
    update_epochs: int = 2
    """Optimizer updates per batch of rollouts; beyond the first the ratio clip matters."""
    temperature: float = 1.0
    """Sampling temperature, also applied to the log-probabilities of the loss."""
    max_new_tokens: int = 3
    """Completion length budget, end-of-sequence token included."""
    adv_eps: float = 1e-6
    """Added to the group standard deviation; a group with equal rewards gets zero advantage."""

    def __post_init__(self) -> None:
        _require(self.group_size >= 2, f"algorithm.group_size must be >= 2, got {self.group_size}")
        _require(
            0 < self.clip_ratio < 1,
            f"algorithm.clip_ratio must be in (0, 1), got {self.clip_ratio}",
        )
        _require(self.kl_coef >= 0, f"algorithm.kl_coef must be >= 0, got {self.kl_coef}")
        _require(self.lr > 0, f"algorithm.lr must be > 0, got {self.lr}")
        _require(
            self.weight_decay >= 0, f"algorithm.weight_decay must be >= 0, got {self.weight_decay}"
        )
        _require(
            self.warmup_steps >= 0, f"algorithm.warmup_steps must be >= 0, got {self.warmup_steps}"
        )
        _require(
            self.max_grad_norm > 0, f"algorithm.max_grad_norm must be > 0, got {self.max_grad_norm}"
        )
        _require(
            self.update_epochs >= 1,
            f"algorithm.update_epochs must be >= 1, got {self.update_epochs}",
        )
        _require(self.temperature > 0, f"algorithm.temperature must be > 0, got {self.temperature}")
        _require(
            self.max_new_tokens >= 1,
            f"algorithm.max_new_tokens must be >= 1, got {self.max_new_tokens}",
        )
        _require(self.adv_eps > 0, f"algorithm.adv_eps must be > 0, got {self.adv_eps}")


@dataclass
class DataConfig:
    """The addition task: prompts `a+b=` with zero-padded operands, answer the decimal sum."""

    max_operand: int = 9
    """Operands are drawn from 0..max_operand (all pairs form the data set)."""
    prompts_per_step: int = 8
    """Prompts per step over all ranks; must be divisible by the number of ranks."""
    format_reward: float = 0.1
    """Reward of a well-formed but wrong answer (digits then end-of-sequence); exact is 1."""

    def __post_init__(self) -> None:
        _require(self.max_operand >= 1, f"data.max_operand must be >= 1, got {self.max_operand}")
        _require(
            self.prompts_per_step >= 1,
            f"data.prompts_per_step must be >= 1, got {self.prompts_per_step}",
        )
        _require(
            0 <= self.format_reward < 1,
            f"data.format_reward must be in [0, 1), got {self.format_reward}",
        )


@dataclass
class MegatronConfig:
    """How `runner.backend=megatron` splits the model; data parallel takes the other ranks."""

    tensor_model_parallel_size: int = 1
    """Ranks each layer's weights are split over (heads, MLP columns and rows, vocabulary)."""
    pipeline_model_parallel_size: int = 1
    """Stages the layers are split into; model.n_layers must be divisible by it."""
    use_distributed_optimizer: bool = True
    """Shard the Adam state over the data-parallel ranks (megatron's distributed optimizer).
    Its checkpoint can change only the data-parallel size on resume; without it, tensor and
    pipeline sizes can change too (with runner.allow_world_size_change)."""

    def __post_init__(self) -> None:
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
            _require(
                getattr(self, name) >= 1, f"megatron.{name} must be >= 1, got {getattr(self, name)}"
            )


@dataclass
class TrainerConfig:
    """The whole run; one section per component."""

    runner: RunnerConfig = field(default_factory=RunnerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    data: DataConfig = field(default_factory=DataConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)

    def __post_init__(self) -> None:
        # Imported here: the task module needs nothing from config, but keep the import graph flat.
        from rljob_trainer.task import AdditionTask

        task = AdditionTask(self.data.max_operand, self.data.format_reward)
        _require(
            self.algorithm.max_new_tokens >= task.max_answer_tokens,
            f"algorithm.max_new_tokens ({self.algorithm.max_new_tokens}) cannot hold the longest "
            f"answer plus end-of-sequence ({task.max_answer_tokens} tokens)",
        )
        needed = task.prompt_tokens + self.algorithm.max_new_tokens
        _require(
            self.model.max_seq_len >= needed,
            f"model.max_seq_len ({self.model.max_seq_len}) must be >= prompt + completion "
            f"length ({needed})",
        )
        if self.runner.backend == "megatron":
            for name in ("n_heads", "d_ff"):
                size = self.megatron.tensor_model_parallel_size
                _require(
                    getattr(self.model, name) % size == 0,
                    f"model.{name} ({getattr(self.model, name)}) must be divisible by "
                    f"megatron.tensor_model_parallel_size ({size})",
                )
            stages = self.megatron.pipeline_model_parallel_size
            _require(
                self.model.n_layers % stages == 0,
                f"model.n_layers ({self.model.n_layers}) must be divisible by "
                f"megatron.pipeline_model_parallel_size ({stages})",
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_override(item: str) -> tuple[str, str]:
    """`runner.save_interval=50` -> ("runner.save_interval", "50"); the field's type converts it."""
    key, sep, value = item.partition("=")
    _require(bool(sep) and bool(key.strip()), f"override {item!r} is not of the form key=value")
    return key.strip(), value


def default_config_path() -> Path:
    return Path(str(resources.files("rljob_trainer").joinpath("configs", DEFAULT_CONFIG)))


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> TrainerConfig:
    """YAML file (default: the packaged grpo_tiny.yaml), then env, then `key=value` overrides."""
    env = os.environ if env is None else env
    config_path = Path(path) if path is not None else default_config_path()
    try:
        from_file = OmegaConf.load(config_path)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {config_path}: {exc}") from exc
    except Exception as exc:  # the YAML parser's own errors
        raise ConfigError(f"config file {config_path} is not valid YAML: {exc}") from exc
    if not isinstance(from_file, DictConfig):
        raise ConfigError(f"config file {config_path} must hold a mapping at the top level")
    sections = {f.name for f in dataclasses.fields(TrainerConfig)}
    for name, value in from_file.items():
        if name in sections and value is not None and not isinstance(value, DictConfig):
            raise ConfigError(f"{name} must be a mapping, got {value!r}")
    from_env = OmegaConf.create({})
    for var, key in ENV_OVERRIDES.items():
        if env.get(var):
            OmegaConf.update(from_env, key, env[var])  # a string: the schema converts it
    from_command_line = [parse_override(item) for item in overrides]
    schema = OmegaConf.structured(TrainerConfig)
    try:
        merged = OmegaConf.merge(
            schema, from_file, from_env,
            OmegaConf.from_dotlist([f"{key}={value}" for key, value in from_command_line]),
        )  # fmt: skip
        if merged.runner.checkpoint_dir is None:
            runner = merged.runner
            runner.checkpoint_dir = str(
                Path(runner.output_dir, runner.experiment_name, "checkpoints")
            )
        config = cast(TrainerConfig, OmegaConf.to_object(merged))
    except ConfigKeyError as exc:
        raise ConfigError(_unknown_key(schema, exc.full_key)) from None
    except ValidationError as exc:
        raise ConfigError(f"{exc.full_key or 'the config'}: {exc.msg.splitlines()[0]}") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    return config


def _unknown_key(schema: DictConfig, full_key: str) -> str:
    section, _, _ = full_key.rpartition(".")
    node = OmegaConf.select(schema, section) if section else schema
    prefix = f"{section}." if section else ""
    valid = ", ".join(prefix + str(k) for k in node) if isinstance(node, DictConfig) else ""
    return f"unknown key {full_key}; valid keys here: {valid}"
