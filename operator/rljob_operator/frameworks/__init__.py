"""The training frameworks rljob knows, one module each, by the name `spec.framework` takes:
how a gang of it starts, its checkpoint layout and resume switch, its save interval setting,
whether it saves on notice, and what each pod needs. Nothing outside these modules names a
framework; a new one is a module here (and its layouts in checkpoints/layouts/)."""

from __future__ import annotations

from pathlib import PurePosixPath

from rljob_contract.steps import STEP_DIR_PREFIX, parse_step

from ..checkpoints.layouts import LAYOUTS
from . import custom, openrlhf, rlinf, rljob, trl, verl
from .base import Framework

FRAMEWORKS: dict[str, Framework] = {
    module.FRAMEWORK.name: module.FRAMEWORK
    for module in (rljob, rlinf, verl, trl, openrlhf, custom)
}
NAMES = tuple(FRAMEWORKS)


def framework(name: str) -> Framework:
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise ValueError(f"unknown framework {name!r}: choose one of {', '.join(NAMES)}") from None


def resume_overrides(
    name: str, checkpoint_path: str, *, custom_template: str | None = None
) -> list[str]:
    """The arguments to append to the trainer's command line to resume from the folder.

    Most frameworks read the step back from the text after `global_step_` in the path, so the
    path must end in `global_step_N` (or the framework's own layout's `<prefix>N`): a trailing
    slash would make that `int("150/")` and crash the trainer. It is taken off here."""
    chosen = framework(name)
    path = checkpoint_path.rstrip("/")
    if not path:
        raise ValueError(f"not a checkpoint folder: {checkpoint_path!r}")
    own = LAYOUTS[chosen.auto_layout] if chosen.auto_layout else None
    step = parse_step(PurePosixPath(path).name, own.folder_prefix if own else STEP_DIR_PREFIX)
    return chosen.resume(path, step, custom_template)


__all__ = ["FRAMEWORKS", "NAMES", "Framework", "framework", "resume_overrides"]
