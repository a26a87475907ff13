"""OpenRLHF (a Ray program, 0.11 with DeepSpeed): `python -m openrlhf.cli.train_ppo_ray`, its
checkpoints `<--ckpt.path>/_actor/global_stepN` (and `_critic/`) of the `openrlhf-deepspeed`
layout, saved every `--ckpt.save_steps` steps (-1, none, by default).

It resumes with `--ckpt.load_enable`, and then loads the folder DeepSpeed's `latest` names,
which its rank 0 writes before the other ranks have finished their part of the save: after a
save cut short it names a torn folder. rljob's Ray bridge therefore has OpenRLHF's own load
(`DeepspeedStrategy.load_ckpt`, its `tag`) take the folder rljob chose, the newest complete
one, in every actor and critic (rljob_podside/rljob_openrlhf_hooks.py). It has no save on notice:
OpenRLHF saves only at the steps `--ckpt.save_steps` names, and a preemption goes back to the
last of them."""

from __future__ import annotations

from pathlib import PurePosixPath

from ..checkpoints.layouts import openrlhf_deepspeed
from .base import Framework


def _resume(path: str, step: int | None, template: str | None) -> list[str]:
    folder = PurePosixPath(path)
    if step is None or folder.parent.name != openrlhf_deepspeed.ACTOR:
        raise ValueError(
            f"openrlhf resumes a {openrlhf_deepspeed.ACTOR}/{openrlhf_deepspeed.PREFIX}N folder "
            f"of --ckpt.path (set checkpoint.directory to --ckpt.path's "
            f"{openrlhf_deepspeed.ACTOR}); {path!r} is none"
        )
    return ["--ckpt.load_enable"]


FRAMEWORK = Framework(
    name="openrlhf",
    launcher="ray",
    resume=_resume,
    bridge="rljob_openrlhf_hooks.py",
    auto_layout=openrlhf_deepspeed.LAYOUT.name,
    save_interval=("--ckpt.save_steps", -1),
    # DeepspeedStrategy.save_ckpt (0.11.2) deletes folders while it keeps max_num or more.
    kept_checkpoints=("--ckpt.max_num", 3),
)
