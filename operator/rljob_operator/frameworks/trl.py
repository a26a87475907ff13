"""TRL (Hugging Face's RL trainers, GRPOTrainer among them, on transformers' Trainer): started
with torchrun, checkpoints in `<output_dir>/checkpoint-N/` (the `hf-trainer` layout), resumed
with `--resume_from_checkpoint=<folder>`. Every torchrun worker starts in rljob's bridge into
the Trainer (rljob_podside/rljob_hf_bridge.py), which saves on notice at the step's end
through the Trainer's own save and reports the steps."""

from __future__ import annotations

from ..checkpoints.layouts import hf_trainer
from .base import Framework


def _resume(path: str, step: int | None, template: str | None) -> list[str]:
    """One argument: the Trainer's parser takes `--flag=value`, and no shell splits it."""
    if step is None:
        raise ValueError(f"trl resumes from a {hf_trainer.PREFIX}N folder; {path!r} is none")
    return [f"--resume_from_checkpoint={path}"]


FRAMEWORK = Framework(
    name="trl",
    launcher="torchrun",
    resume=_resume,
    auto_layout=hf_trainer.LAYOUT.name,
    save_on_notice="bridge",
    reports_steps=True,
    bridge="rljob_hf_bridge.py",
    weights_only_flag="--save_only_model",
)
