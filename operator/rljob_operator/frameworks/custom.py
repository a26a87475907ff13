"""Any other trainer: the job's command, its resumeArgsTemplate filled with `{path}` and
`{step}` (without one, the trainer resumes from RLJOB_RESUME_DIR alone)."""

from __future__ import annotations

import shlex
from string import Formatter

from .base import Framework


def _resume(path: str, step: int | None, template: str | None) -> list[str]:
    """The template split like a shell would, then `{path}` and `{step}` filled into each
    word (so a path with spaces stays one argument)."""
    if not template:
        return []
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


FRAMEWORK = Framework(name="custom", launcher="torchrun", resume=_resume)
