"""What rljob knows of one training framework, and the checks its resume switch shares."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# Characters a Hydra/OmegaConf override value may carry unquoted without changing meaning.
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./@+:~%-]+")

# (the checkpoint folder's path, its step where the name says it, spec.checkpoint's
# resumeArgsTemplate) -> the arguments that make the trainer resume from it
Resume = Callable[[str, int | None, str | None], list[str]]


def no_env(spec: Any, rank: int) -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class Framework:
    name: str  # spec.framework
    launcher: str  # how its gang starts by default: "torchrun" or "ray" (launcher.launchers)
    resume: Resume
    # The command when spec.command is empty; () where the job must give one.
    default_command: tuple[str, ...] = ()
    # What `checkpoint.layout: auto` means for a framework whose trainer writes one layout
    # only; None: told from the files.
    auto_layout: str | None = None
    # The override that sets its save interval, and the default of the framework's own
    # configuration where a command without a config of its own gets it (None: unknown).
    save_interval: tuple[str, int | None] | None = None
    # The option that sets how many checkpoints it keeps, and its default, where its rotation
    # deletes the oldest before it writes the next: keeping 1 leaves none during a save.
    kept_checkpoints: tuple[str, int] | None = None
    # The boolean flag that has its trainer save the weights alone, which no resume can go on
    # from where it stopped (no optimizer, schedule or RNG state).
    weights_only_flag: str | None = None
    # Whether its trainer saves when its pods are told to go: "trainer" (by itself),
    # "bridge" (rljob's bridge into its loop, spec.saveOnNotice), "" (not known to).
    save_on_notice: Literal["trainer", "bridge", ""] = ""
    # The pod-side file (rljob_podside) of rljob's bridge into its loop, which its own launcher
    # ships and runs (`bridge_for`): under torchrun the program every worker starts in, which
    # runs the trainer's Python program; under Ray the hooks the Ray node's driver and workers
    # load. None: none.
    bridge: str | None = None
    # Whether rljob sees its steps: its trainer (or rljob's bridge into its loop) marks the
    # pod that runs it once a step of the attempt is done (contract.ENV_TRAINED_MARKER), which
    # turns the pod Ready, and writes the progress record. Without it the time from the pods
    # running to the first step counts as training, an upper bound (reconcile.policies.goodput).
    reports_steps: bool = False
    # Whether the trainer can drop the step in progress to save the last finished one in time.
    abandons_step: bool = False
    # Variables each pod gets from the framework (spec, the pod's rank).
    pod_env: Callable[[Any, int], Mapping[str, str]] = field(default=no_env)

    def bridge_for(self, launcher: str) -> str | None:
        """The bridge a job started by `launcher` (spec.launcher) ships: the framework's own,
        where the job starts it the framework's way; a bridge hooks one way of running it."""
        return self.bridge if launcher == self.launcher else None


def override_path(framework: str, path: str, step: int | None, absolute: bool = False) -> str:
    """`path` as a config override's value, for a framework that reads the step back from the
    text after `global_step_` (`int(path.split("global_step_")[-1])`)."""
    if step is None:
        raise ValueError(f"{framework} reads the step from the path; {path!r} is no global_step_N")
    if not _PLAIN_VALUE.fullmatch(path):
        raise ValueError(f"{path!r} has characters a config override would misread")
    if absolute and not path.startswith("/"):
        raise ValueError(f"{framework} needs an absolute path, got {path!r}")
    return path
