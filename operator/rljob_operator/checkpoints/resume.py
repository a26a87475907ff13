"""The command-line overrides that make each framework resume from a chosen checkpoint.

All three frameworks read the step back from the text after `global_step_` in the path
(`int(path.split("global_step_")[-1])`), so the path must end in `global_step_N`: a
trailing slash would make that `int("150/")` and crash the trainer.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from string import Formatter

from rljob_contract.steps import parse_step

FRAMEWORKS = ("rljob", "rlinf", "verl", "custom")
# Characters a Hydra/OmegaConf override value may carry unquoted without changing meaning.
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./@+:~%-]+")


def resume_overrides(
    framework: str, checkpoint_path: str, *, custom_template: str | None = None
) -> list[str]:
    """The arguments to append to the trainer's command line to resume from the path.

    rljob, rlinf: `runner.resume_dir=<dir>`.
    verl: `trainer.resume_mode=resume_path trainer.resume_from_path=<dir>
    trainer.default_local_dir=<parent>`: the last keeps later saves (and the run's
    tracker) beside the resumed one; verl needs an absolute path here.
    custom: `custom_template` split like a shell would, then `{path}` and `{step}`
    filled into each word (so a path with spaces stays one argument).
    """
    path = _normalise(checkpoint_path)
    step = parse_step(PurePosixPath(path).name)
    if framework == "custom":
        return _fill(custom_template, path, step)
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}: choose one of {', '.join(FRAMEWORKS)}")
    if step is None:
        raise ValueError(f"{framework} reads the step from the path; {path!r} is no global_step_N")
    if not _PLAIN_VALUE.fullmatch(path):
        raise ValueError(f"{path!r} has characters a config override would misread")
    if framework == "verl":
        if not path.startswith("/"):
            raise ValueError(f"verl needs an absolute path, got {path!r}")
        return [
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={path}",
            f"trainer.default_local_dir={PurePosixPath(path).parent}",
        ]
    return [f"runner.resume_dir={path}"]


def _fill(template: str | None, path: str, step: int | None) -> list[str]:
    if not template:
        raise ValueError("framework 'custom' needs a template with {path} and/or {step}")
    try:
        words = shlex.split(template)
        fields = {f for word in words for _, f, _, _ in Formatter().parse(word) if f is not None}
    except ValueError as exc:
        raise ValueError(f"bad custom resume template {template!r}: {exc}") from exc
    if not fields <= {"path", "step"}:
        raise ValueError(f"custom resume template may use only {{path}} and {{step}}: {template!r}")
    if "step" in fields and step is None:
        raise ValueError(f"template uses {{step}} but {path!r} is no global_step_N")
    return [word.format(path=path, step=step) for word in words]


def _normalise(path: str) -> str:
    stripped = path.rstrip("/")
    if not stripped:
        raise ValueError(f"not a checkpoint folder: {path!r}")
    return stripped
