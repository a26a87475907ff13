"""rljob's own GRPO trainer (trainer_image/): torchrun, its sealed layout, `runner.resume_dir`,
its own save on SIGTERM, which can abandon the step in progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rljob_contract as contract
from rljob_contract.manifest import LAYOUT_NAME

from .base import Framework, override_path


def _resume(path: str, step: int | None, template: str | None) -> list[str]:
    return [f"runner.resume_dir={override_path('rljob', path, step)}"]


def _pod_env(spec: Any, rank: int) -> Mapping[str, str]:
    return {contract.ENV_BACKEND: spec.backend}  # the trainer's runner.backend follows it


FRAMEWORK = Framework(
    name="rljob",
    launcher="torchrun",
    resume=_resume,
    default_command=("python", "-m", "rljob_trainer"),
    # Every folder is sealed with its manifest, FSDP and Megatron alike; told from the files,
    # a Megatron save torn before the manifest would read as complete rlinf-megatron.
    auto_layout=LAYOUT_NAME,
    save_on_notice="trainer",
    reports_steps=True,
    abandons_step=True,
    pod_env=_pod_env,
)
