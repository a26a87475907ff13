"""rljob's bridge into RLinf's and verl's own training loops: save on notice, and progress.

Runs inside the user's image on its own Python (standard library and the mounted
rljob_contract only), in two places: the driver, which ray_node.py runs through
`run_driver`, and every Ray worker process, which imports this module at start
(ray_node.py lists it in Ray's `preload_python_modules`). Importing it with
RLJOB_NOTICE_FILE set installs the hooks below (with RLJOB_SAVE_ON_NOTICE=false they
report the steps and save nothing on notice); each applies only once the framework's
module is imported in that process, so a process that never runs a training loop pays for
one entry in `sys.meta_path`.

The hooks use the frameworks' own save-and-stop paths; rljob writes nothing into their
checkpoint folders:
- RLinf: its runners call `rlinf.utils.runner_utils.check_progress(step, ...,
  run_time_exceeded=run_timer.is_finished())` after every step, and when the run timer is
  finished they save and return. After a notice the hook makes the run timer
  (`rlinf.utils.timers.Timer`) finished, so RLinf saves this step and stops; the driver
  then exits 75. A runner that passes `run_time_exceeded=False` itself gets it True, saves,
  and is held at its next step, as verl is.
- verl runs its loop in its TaskRunner, a Ray worker, with one of two trainers:
  - the V1 trainer (`trainer.use_v1=true`, verl 0.9's default): `PPOTrainer.fit` runs
    `step()` (rollout and update), then saves through `_save_checkpoint()` when its
    `save_freq` says so. After a notice the hook has `_save_checkpoint()` save the step that
    `step()` just finished, where verl's own rule would have (unless that rule saves it
    anyway);
  - the legacy trainer (`trainer.use_v1=false`): `RayPPOTrainer.fit` calls
    `should_save_ckpt_esi` after every actor update and saves when it returns True, which
    verl's own rule does when MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP is near and
    one step has finished. After a notice the hook sets that time a moment ahead before
    verl's check.
  Either way, at the step's `Tracking.log` the hook reports the save and holds the loop
  until ray_node.py ends the driver. Both need `trainer.save_freq > 0` (checkpoints on),
  and the last step saves and ends the run by verl's own rule.
Both hooks write the step each step finishes (and the step time) to rljob-progress.json
beside the step folders, from which the operator counts the steps a restart lost.
"""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import rljob_contract as contract
from rljob_contract import progress

VERL_EXPIRATION = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
# How far ahead of now the hook puts verl's expiration time: inside verl's window (a step
# plus a save) and still ahead of now when verl compares, a moment later.
VERL_EXPIRATION_AHEAD_SECONDS = 1.0


class Loop:
    """What the bridge knows in this process: the notice, the steps, a save on notice."""

    def __init__(
        self,
        notice_file: str | None,
        checkpoint_dir: str | None,
        attempt: str | None,
        save_on_notice: bool = True,
    ) -> None:
        self.notice_file = notice_file if save_on_notice else None  # spec.ray.saveOnNotice
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.attempt = int(attempt) if attempt and attempt.isdigit() else None
        self.step_ended: float | None = None
        self.step_seconds: list[float] = []
        self.saving_on_notice: int | None = None  # the step the framework saves on notice

    def notice(self) -> bool:
        return bool(self.notice_file) and os.path.exists(self.notice_file)  # type: ignore[arg-type]

    def finished(self, step: int, seconds: float | None = None, measure: bool = False) -> None:
        """Step `step` is done: record it for the operator, with its time when given, or
        when `measure`d from the end of the step before (the first one has no such end)."""
        now = time.monotonic()
        if seconds is None and measure and self.step_ended is not None:
            seconds = now - self.step_ended
        if seconds:
            self.step_seconds.append(seconds)
        self.step_ended = now
        self.write(step, progress.RUNNING)

    def write(self, step: int, status: str) -> None:
        if self.checkpoint_dir is None:
            return
        mean = sum(self.step_seconds) / len(self.step_seconds) if self.step_seconds else None
        record = progress.progress_record(step, self.attempt, status, mean)
        progress.write_progress(self.checkpoint_dir, record, progress.FRAMEWORK_PROGRESS_FILE_NAME)


HOLD = threading.Event().wait  # until ray_node.py ends the driver

LOOP = Loop(
    os.environ.get(contract.ENV_NOTICE_FILE),
    os.environ.get(contract.ENV_CHECKPOINT_DIR),
    os.environ.get(contract.ENV_ATTEMPT),
    os.environ.get(contract.ENV_SAVE_ON_NOTICE, "true") != "false",
)


# --------------------------------------------------------------------------- RLinf
def wrap_check_progress(
    check_progress: Callable[..., Any], loop: Loop = LOOP, hold: Callable[[], Any] = HOLD
):
    """RLinf's check_progress(step, max_steps, val_check_interval, save_interval, ...,
    run_time_exceeded=...), which also reports each step and, on notice, has RLinf save.

    The reasoning runners return once they saved; the next call, in a runner that goes on,
    means the save is done: report it and hold the loop until the driver is ended.
    """

    def checked(step: int, *args: Any, **kwargs: Any):
        if loop.saving_on_notice is not None:
            report_saved(loop, hold)
        loop.finished(step, measure=True)
        save_interval = args[2] if len(args) > 2 else kwargs.get("save_interval", 0)
        if not loop.notice() or not save_interval or save_interval <= 0:
            return check_progress(step, *args, **kwargs)
        if len(args) >= 5:  # run_time_exceeded given by position
            args = (*args[:4], True, *args[5:])
        else:
            kwargs["run_time_exceeded"] = True
        result = check_progress(step, *args, **kwargs)
        _, save_model, is_train_end = result
        if save_model and not is_train_end:
            loop.saving_on_notice = step
            print(f"rljob: notice: RLinf saves step {step} and stops", flush=True)
        return result

    return checked


def report_saved(loop: Loop, hold: Callable[[], Any]) -> None:
    assert loop.saving_on_notice is not None
    loop.write(loop.saving_on_notice, progress.CHECKPOINTED_ON_REQUEST)
    print(f"rljob: saved step {loop.saving_on_notice} on notice; waiting to be stopped",
          flush=True)  # fmt: skip
    hold()


def patch_rlinf(module: ModuleType) -> None:
    module.check_progress = wrap_check_progress(module.check_progress)


def wrap_timer_is_finished(is_finished: Callable[[Any], bool], loop: Loop = LOOP):
    """RLinf's run timer, finished on notice as when its time limit is reached."""

    def finished(self: Any) -> bool:
        return loop.notice() or is_finished(self)

    return finished


def patch_rlinf_timer(module: ModuleType) -> None:
    module.Timer.is_finished = wrap_timer_is_finished(module.Timer.is_finished)


# --------------------------------------------------------------------------- verl
def wrap_should_save_ckpt_esi(should_save: Callable[..., bool], loop: Loop = LOOP):
    """verl's should_save_ckpt_esi, with its expiration time set a moment ahead on notice."""

    def should_save_ckpt_esi(*args: Any, **kwargs: Any) -> bool:
        if loop.notice() and loop.saving_on_notice is None:
            os.environ[VERL_EXPIRATION] = str(time.time() + VERL_EXPIRATION_AHEAD_SECONDS)
            fired = should_save(*args, **kwargs)
            if fired:
                loop.saving_on_notice = -1  # verl saves now; its step comes with the log
                print("rljob: notice: verl saves this step (ESI)", flush=True)
            return fired
        return should_save(*args, **kwargs)

    return should_save_ckpt_esi


def wrap_v1_step(step: Callable[..., Any], loop: Loop = LOOP):
    """verl's V1 PPOTrainer.step (one step's rollout and update). On notice, once the step is
    done, verl's own `_save_checkpoint` saves it, unless verl's save rule is about to."""

    def stepped(self: Any, *args: Any, **kwargs: Any) -> Any:
        batch = step(self, *args, **kwargs)
        if not loop.notice() or loop.saving_on_notice is not None:
            return batch
        save_freq = self.config.trainer.save_freq
        if save_freq <= 0 or self.global_steps >= self.total_training_steps:
            return batch  # checkpoints off, or the last step: verl ends the run itself
        loop.saving_on_notice = self.global_steps
        print(f"rljob: notice: verl saves step {self.global_steps}", flush=True)
        if self.global_steps % save_freq != 0:
            self._save_checkpoint()  # else verl's periodic save of this step comes next
        return batch

    return stepped


def wrap_tracking_log(log: Callable[..., Any], loop: Loop = LOOP, hold: Callable[[], Any] = HOLD):
    """verl's Tracking.log, called at the end of every step with the step: report it, and
    after a save on notice, report that and hold the loop until the driver is ended."""

    def logged(self: Any, data: Any, step: int, *args: Any, **kwargs: Any) -> Any:
        result = log(self, data, step, *args, **kwargs)
        seconds = data.get("timing_s/step") if isinstance(data, dict) else None
        loop.finished(step, seconds if isinstance(seconds, int | float) else None)
        if loop.saving_on_notice is not None:
            loop.saving_on_notice = step
            report_saved(loop, hold)
        return result

    return logged


def patch_verl_trainer(module: ModuleType) -> None:
    module.should_save_ckpt_esi = wrap_should_save_ckpt_esi(module.should_save_ckpt_esi)


def patch_verl_v1_trainer(module: ModuleType) -> None:
    module.PPOTrainer.step = wrap_v1_step(module.PPOTrainer.step)


def patch_verl_tracking(module: ModuleType) -> None:
    module.Tracking.log = wrap_tracking_log(module.Tracking.log)


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "rlinf.utils.runner_utils": patch_rlinf,
    "rlinf.utils.timers": patch_rlinf_timer,
    "verl.trainer.ppo.ray_trainer": patch_verl_trainer,
    "verl.trainer.ppo.v1.trainer_base": patch_verl_v1_trainer,
    "verl.utils.tracking": patch_verl_tracking,
}


# --------------------------------------------------------------------------- import hook
class PatchOnImport(importlib.abc.MetaPathFinder):
    """Applies `patches[name]` to module `name` right after it executes, before anything
    imports a name from it."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        spec = None
        for finder in (f for f in sys.meta_path if f is not self):
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(patches: dict[str, Callable[[ModuleType], None]] = PATCHES) -> None:
    """Hook the frameworks' modules in this process (once; those imported already now)."""
    if any(isinstance(f, PatchOnImport) for f in sys.meta_path):
        return
    for name, patch in patches.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, PatchOnImport(patches))


# --------------------------------------------------------------------------- the driver
def run_driver(argv: list[str], loop: Loop = LOOP) -> int:
    """Run `[-u] (-m MODULE | SCRIPT) ARGS...` here, as Python would, with the hooks on.

    Exits 75 when the framework saved on notice and stopped (RLinf returns normally then).
    """
    install()
    rest = list(argv)
    while rest[:1] == ["-u"]:
        rest = rest[1:]
    if not rest or (rest[0].startswith("-") and (rest[0] != "-m" or len(rest) < 2)):
        raise SystemExit(f"rljob: cannot run the driver {argv!r}: only [-u] -m MODULE or SCRIPT")
    code: int | str | None = 0
    try:  # sys.path[0] is this launcher's folder: make it what Python would have made it
        if rest[0] == "-m":
            sys.argv = [rest[1], *rest[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(rest)
            sys.path[0] = str(Path(rest[0]).resolve().parent)
            runpy.run_path(rest[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    if loop.saving_on_notice is not None and code in (0, None):
        loop.write(loop.saving_on_notice, progress.CHECKPOINTED_ON_REQUEST)
        return contract.EXIT_CHECKPOINTED_ON_REQUEST
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


if os.environ.get(contract.ENV_NOTICE_FILE):
    install()
