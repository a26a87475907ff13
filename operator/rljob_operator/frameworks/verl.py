"""verl (a Ray program): `trainer.resume_mode=resume_path`, saves every `trainer.save_freq`
steps (-1, none, by default), save on notice through rljob's bridge."""

from __future__ import annotations

from pathlib import PurePosixPath

from .base import Framework, override_path


def _resume(path: str, step: int | None, template: str | None) -> list[str]:
    """The last override keeps later saves (and the run's tracker) beside the resumed one;
    verl needs an absolute path here."""
    checked = override_path("verl", path, step, absolute=True)
    return [
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checked}",
        f"trainer.default_local_dir={PurePosixPath(checked).parent}",
    ]


FRAMEWORK = Framework(
    name="verl",
    launcher="ray",
    resume=_resume,
    bridge="rljob_verl_hooks.py",
    save_interval=("trainer.save_freq", -1),
    save_on_notice="bridge",
    reports_steps=True,
)
