"""rljob's bridge into the loops of the Ray frameworks (save on notice, and progress), the part
they share: what the bridge knows in a process (`Loop`), the hooks installed, and the driver.
Each framework's hooks are a module of their own beside it (rljob_rlinf_hooks.py,
rljob_verl_hooks.py, rljob_openrlhf_hooks.py), which the job's launcher ConfigMap ships for
the job's framework (rljob_operator.frameworks: `Framework.bridge`); this module installs the
hooks of those it finds beside it.

Runs inside the user's image on its own Python (standard library and the mounted
rljob_contract only), in two places: the driver, which ray_node.py runs through
`run_driver`, and every Ray worker process, which imports this module at start
(ray_node.py lists it in Ray's `preload_python_modules`). Importing it with
RLJOB_NOTICE_FILE set installs the hooks (with RLJOB_SAVE_ON_NOTICE=false they
report the steps and save nothing on notice); each applies only once the framework's
module is imported in that process, so a process that never runs a training loop pays for
one entry in `sys.meta_path`.

The bridge is a guest in the user's program (see rljob_guest). Each hook patches the module
that defines its name, right after that module runs, and only once it has checked that the
name is there with the parameters the hook reads (by name, never by position). A hook that
finds something else installs nothing, and a failure inside a hook falls back to the
framework's own call: the framework then runs as it is, without rljob's save on notice, and
the bridge says why in the progress record (`save_on_notice_unavailable`), which the head and
the operator read. It never breaks the user's import or loop. The hooks use the frameworks'
own save-and-stop paths; rljob writes nothing into their checkpoint folders.

The hooks write the step each step finishes (and the step time) to rljob-progress.json beside
the step folders, from which the operator counts the steps a restart lost. A hook that only
makes the save on notice come sooner, and that finds the framework other than it expects, is
said there too (`save_on_notice_late`).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rljob_contract as contract
import rljob_guest  # mounted beside this file (here: pytest's pythonpath in pyproject.toml)
from rljob_contract import progress
from rljob_contract.untrusted import positive_number
from rljob_guest import Hook, run_program, version_of

# framework -> why its save on notice is unavailable in a process where its loop reported
# steps but none ran through the hook it saves at (a framework's hooks module adds its own).
UNSEEN_SAVE_PATH: dict[str, Callable[[], str]] = {}


class Loop:
    """What the bridge knows in this process: the notice, the steps, a save on notice, and
    why a framework's save on notice is unavailable here."""

    def __init__(
        self,
        notice_file: str | None,
        checkpoint_dir: str | None,
        attempt: str | None,
        save_on_notice: bool = True,
    ) -> None:
        self.notice_file = notice_file if save_on_notice else None  # spec.saveOnNotice
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.attempt = int(attempt) if attempt and attempt.isdigit() else None
        self.step_ended: float | None = None
        self.clock = progress.StepClock()  # when this attempt's first and latest step ended
        self.step_seconds: list[float] = []  # the steps' own times, without their saves
        self.save_seconds: list[float] = []  # the saves' times, where the framework says them
        self.with_save: list[float] = []  # measured steps: the times of those that held a save
        self.saved_last_step = False  # measured steps: the step before this one saved
        self.saving_on_notice: int | None = None  # the step the framework saves on notice
        self.last_saved: int | None = None  # the step the framework's own last save held
        self.unavailable: dict[str, list[str]] = {}  # framework -> why, in the order found
        self.late: dict[str, list[str]] = {}  # framework -> why its save on notice comes later
        self.save_paths_seen: set[str] = set()  # frameworks whose save-on-notice hook ran
        self.save_interval: object = None  # as the framework's loop was last given it
        # (framework, what stopped it) where rljob's notice stopped the framework's loop
        # through its own stop rule (RLinf's run timer), before any save
        self.stopped_by_notice: tuple[str, str] | None = None
        self.framework = ""  # whose loop reported a step in this process (install: the first)
        self.stopped_without_save: str | None = None  # why the run ended on notice, unsaved

    def notice(self) -> bool:
        return bool(self.notice_file) and os.path.exists(self.notice_file)  # type: ignore[arg-type]

    def can_save(self, framework: str) -> bool:
        return not self.unavailable.get(framework)

    def cannot_save(self, framework: str, why: str) -> None:
        """Turn `framework`'s save on notice off in this process, saying why (once)."""
        whys = self.unavailable.setdefault(framework, [])
        if why not in whys:
            whys.append(why)
            print(f"rljob: save on notice unavailable: {why}; the framework runs as it is, and "
                  "a preemption goes back to its last periodic save", file=sys.stderr,
                  flush=True)  # fmt: skip

    def saves_later(self, framework: str, why: str) -> None:
        """A hook that only makes `framework`'s save on notice come sooner is missing (once)."""
        whys = self.late.setdefault(framework, [])
        if why not in whys:
            whys.append(why)
            print(f"rljob: {why}", file=sys.stderr, flush=True)

    def finished(
        self,
        step: int,
        framework: str,
        seconds: float | None = None,
        measure: bool = False,
        save_seconds: float | None = None,
    ) -> None:
        """Step `step` is done: record it for the operator, with its time when given (and the
        part of it its save took), or when `measure`d from the end of the step before (the
        first one has no such end; one after a save holds that save)."""
        now = time.monotonic()
        if seconds is None and measure and self.step_ended is not None:
            seconds = now - self.step_ended
            if self.saved_last_step:
                self.with_save.append(seconds)
                seconds = None
        if save_seconds:
            self.save_seconds.append(save_seconds)
            seconds = seconds - save_seconds if seconds and seconds > save_seconds else seconds
        if seconds:
            self.step_seconds.append(seconds)
        self.step_ended = now
        self.clock.stepped()
        self.framework = framework
        self.write(step, progress.RUNNING)

    def mean_save_seconds(self) -> float | None:
        """A save's time: as the framework timed it (verl), else what the steps that held a
        save took more than the others (RLinf)."""
        if self.save_seconds:
            return mean(self.save_seconds)
        steps, with_save = mean(self.step_seconds), mean(self.with_save)
        extra = with_save - steps if steps is not None and with_save is not None else None
        return extra if extra is not None and extra > 0 else None

    def why_unavailable(self, framework: str) -> str | None:
        whys = list(self.unavailable.get(framework, ()))
        if framework in UNSEEN_SAVE_PATH and framework not in self.save_paths_seen:
            whys.append(UNSEEN_SAVE_PATH[framework]())
        return "; ".join(whys) or None

    def write(self, step: int, status: str) -> None:
        if self.checkpoint_dir is None:
            return
        late = "; ".join(self.late.get(self.framework, ())) or None
        record = progress.progress_record(
            step, self.attempt, status, mean(self.step_seconds),
            self.why_unavailable(self.framework), self.mean_save_seconds(), late, self.clock,
        )  # fmt: skip
        progress.write_progress(self.checkpoint_dir, record, progress.FRAMEWORK_PROGRESS_FILE_NAME)


HOLD = threading.Event().wait  # until ray_node.py ends the driver

LOOP = Loop(
    os.environ.get(contract.ENV_NOTICE_FILE),
    os.environ.get(contract.ENV_CHECKPOINT_DIR),
    os.environ.get(contract.ENV_ATTEMPT),
    os.environ.get(contract.ENV_SAVE_ON_NOTICE, "true") != "false",
)


def failed(loop: Loop, framework: str, exc: BaseException) -> None:
    """rljob's own code failed inside the framework's call: off, and the call goes on."""
    loop.cannot_save(framework, f"{version_of(framework)}: rljob's bridge failed: {exc!r}")


def report_saved(loop: Loop, hold: Callable[[], Any]) -> None:
    assert loop.saving_on_notice is not None
    loop.write(loop.saving_on_notice, progress.CHECKPOINTED_ON_REQUEST)
    print(f"rljob: saved step {loop.saving_on_notice} on notice; waiting to be stopped",
          flush=True)  # fmt: skip
    hold()


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def positive(value: object) -> bool:
    return positive_number(value) is not None


HOOKS_GLOB = "rljob_*_hooks.py"  # a framework's hooks, shipped beside this file


def shipped_hooks(folder: Path = Path(__file__).parent) -> tuple[Hook, ...]:
    """The hooks of the frameworks' modules beside this file: the job's framework's in a pod.
    One that cannot be imported is left out, and says why."""
    hooks: list[Hook] = []
    for path in sorted(folder.glob(HOOKS_GLOB)):
        try:
            hooks += importlib.import_module(path.stem).HOOKS
        except Exception as exc:
            print(f"rljob: {path.name}: not installed: {exc!r}; the framework runs as it is",
                  file=sys.stderr, flush=True)  # fmt: skip
    return tuple(hooks)


def install(hooks: tuple[Hook, ...] | None = None, loop: Loop = LOOP) -> None:
    """Hook the frameworks' modules in this process (once; those imported already now)."""
    hooks = shipped_hooks() if hooks is None else hooks
    if hooks and not loop.framework:
        loop.framework = hooks[0].framework
    rljob_guest.install(hooks, loop)


# --------------------------------------------------------------------------- the driver
def run_driver(argv: list[str], loop: Loop = LOOP) -> int:
    """Run `[-u] (-m MODULE | SCRIPT) ARGS...` here, as Python would, with the hooks on.

    Exits 75 when the framework saved on notice and stopped (RLinf returns normally then),
    and never 0 when a notice stopped it without a save (`loop.stopped_without_save`).
    """
    install()
    code = run_program(argv)
    if loop.saving_on_notice is not None and code in (0, None):
        loop.write(loop.saving_on_notice, progress.CHECKPOINTED_ON_REQUEST)
        return contract.EXIT_CHECKPOINTED_ON_REQUEST
    if loop.stopped_by_notice and code in (0, None):  # stopped by rljob's notice, unsaved
        framework, how = loop.stopped_by_notice
        loop.stopped_without_save = loop.why_unavailable(framework) or f"{how} without a save"
        return 128 + signal.SIGTERM  # not 0: the framework did not finish its steps
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


if os.environ.get(contract.ENV_NOTICE_FILE):
    install()
