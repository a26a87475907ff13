"""The trainer's config: YAML < operator env vars < command-line overrides, validated."""

from __future__ import annotations

from pathlib import Path

import pytest
import rljob_contract as contract
from rljob_trainer.config import ConfigError, TrainerConfig, load_config


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_packaged_default_config_loads() -> None:
    cfg = load_config(env={})
    assert isinstance(cfg, TrainerConfig)
    assert cfg.runner.checkpoint_dir == str(Path("outputs/grpo_tiny/checkpoints"))
    assert cfg.runner.experiment_dir == str(Path("outputs/grpo_tiny"))


def test_checkpoint_dir_defaults_under_output_dir(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "runner: {output_dir: /o, experiment_name: e}\n")
    assert load_config(path, env={}).runner.checkpoint_dir == "/o/e/checkpoints"


def test_env_overrides_file_and_command_line_overrides_env(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "runner: {save_interval: 5, max_num_checkpoints: 7}\n")
    env = {
        contract.ENV_SAVE_INTERVAL: "20",
        contract.ENV_MAX_TO_KEEP: "2",
        contract.ENV_CHECKPOINT_DIR: "/ckpt",
        contract.ENV_RESUME_DIR: "/ckpt/global_step_40",
        contract.ENV_CHECKPOINT_REQUEST_FILE: "/etc/rljob/podinfo/checkpoint-request",
        contract.ENV_GRACE_SECONDS: "30",
    }
    cfg = load_config(path, env=env)
    assert cfg.runner.grace_seconds == 30.0
    assert cfg.runner.save_interval == 20
    assert cfg.runner.max_num_checkpoints == 2
    assert cfg.runner.checkpoint_dir == "/ckpt"
    assert cfg.runner.resume_dir == "/ckpt/global_step_40"
    assert cfg.runner.checkpoint_request_file == "/etc/rljob/podinfo/checkpoint-request"

    cfg = load_config(path, ["runner.save_interval=50", "runner.resume_dir=null"], env=env)
    assert cfg.runner.save_interval == 50
    assert cfg.runner.resume_dir is None
    assert cfg.runner.max_num_checkpoints == 2


def test_empty_env_values_do_not_override(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "runner: {save_interval: 5}\n")
    assert load_config(path, env={contract.ENV_SAVE_INTERVAL: ""}).runner.save_interval == 5


def test_overrides_are_typed() -> None:
    cfg = load_config(
        None,
        ["runner.async_save=true", "algorithm.lr=3e-4", "model.n_layers=4", "runner.seed=007"],
        env={},
    )
    assert cfg.runner.async_save is True
    assert cfg.algorithm.lr == pytest.approx(3e-4)
    assert cfg.model.n_layers == 4
    assert cfg.runner.seed == 7


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("runner.save_interval=0", "runner.save_interval must be >= 1"),
        (
            "runner.save_intervall=3",
            "unknown key runner.save_intervall; valid keys here: runner.output_dir",
        ),
        ("trainer.x=1", "unknown key trainer; valid keys here: runner, model, algorithm, data"),
        (
            "runner.save_interval=ten",
            "runner.save_interval: Value 'ten' of type 'str' could not be converted to Integer",
        ),
        ("runner.async_save=maybe", "runner.async_save: Value 'maybe' is not a valid bool"),
        ("model.n_heads=3", "must be a positive multiple of model.n_heads"),
        ("algorithm.group_size=1", "algorithm.group_size must be >= 2"),
        ("algorithm.max_new_tokens=1", "cannot hold the longest answer"),
        ("model.max_seq_len=4", "model.max_seq_len (4) must be >="),
        ("runner.device=tpu", "runner.device must be one of"),
        ("runner.grace_seconds=-1", "runner.grace_seconds must be >= 0"),
        ("novalue", "is not of the form key=value"),
    ],
)
def test_invalid_values_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(None, [override], env={})
    assert message in str(excinfo.value)


def test_yaml_type_errors_are_named(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"model\.d_model: Value '64\.5' of type 'float' could not"
    ):
        load_config(_yaml(tmp_path, "model: {d_model: 64.5}\n"), env={})
    with pytest.raises(ConfigError, match="runner must be a mapping"):
        load_config(_yaml(tmp_path, "runner: 3\n"), env={})
    with pytest.raises(ConfigError, match=r"runner\.experiment_name: Incompatible value 'None'"):
        load_config(_yaml(tmp_path, "runner: {experiment_name: null}\n"), env={})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["runner.backend=deepspeed"], "runner.backend must be one of fsdp, megatron"),
        (
            ["runner.backend=megatron", "runner.async_save=true"],
            "runner.async_save is not supported with runner.backend=megatron",
        ),
        (
            ["runner.backend=megatron", "megatron.tensor_model_parallel_size=3"],
            "model.n_heads (4) must be divisible by megatron.tensor_model_parallel_size (3)",
        ),
        (
            ["runner.backend=megatron", "megatron.pipeline_model_parallel_size=3"],
            "model.n_layers (2) must be divisible by megatron.pipeline_model_parallel_size (3)",
        ),
        (["megatron.tensor_model_parallel_size=0"], "must be >= 1"),
    ],
)
def test_the_megatron_backend_checks_its_split(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(None, overrides, env={})
    assert message in str(excinfo.value)


def test_the_operator_chooses_the_backend() -> None:
    cfg = load_config(None, [], env={contract.ENV_BACKEND: "megatron"})
    assert cfg.runner.backend == "megatron"
    assert load_config(None, [], env={}).runner.backend == "fsdp"
