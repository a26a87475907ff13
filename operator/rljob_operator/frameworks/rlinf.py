"""RLinf (a Ray program): `runner.resume_dir`, saves every `runner.save_interval` steps (its
runs name a config of their own), save on notice through rljob's bridge, and the node's rank
in RLINF_NODE_RANK."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Framework, override_path


def _resume(path: str, step: int | None, template: str | None) -> list[str]:
    return [f"runner.resume_dir={override_path('rlinf', path, step)}"]


def _pod_env(spec: Any, rank: int) -> Mapping[str, str]:
    return {"RLINF_NODE_RANK": str(rank)}  # RLinf's own name for the node's rank


FRAMEWORK = Framework(
    name="rlinf",
    launcher="ray",
    resume=_resume,
    bridge="rljob_rlinf_hooks.py",
    save_interval=("runner.save_interval", None),
    save_on_notice="bridge",
    reports_steps=True,
    pod_env=_pod_env,
)
