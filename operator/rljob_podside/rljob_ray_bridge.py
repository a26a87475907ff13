"""rljob's bridge into RLinf's and verl's own training loops (save on notice, and progress), and
into OpenRLHF's load (the checkpoint rljob chose).

Runs inside the user's image on its own Python (standard library and the mounted
rljob_contract only), in two places: the driver, which ray_node.py runs through
`run_driver`, and every Ray worker process, which imports this module at start
(ray_node.py lists it in Ray's `preload_python_modules`). Importing it with
RLJOB_NOTICE_FILE set installs the hooks below (with RLJOB_SAVE_ON_NOTICE=false they
report the steps and save nothing on notice); each applies only once the framework's
module is imported in that process, so a process that never runs a training loop pays for
one entry in `sys.meta_path`.

The bridge is a guest in the user's program (see HOOKS). Each hook patches the module that
defines its name, right after that module runs, and only once it has checked that the name
is there with the parameters the hook reads (by name, never by position). A hook that finds
something else installs nothing, and a failure inside a hook falls back to the framework's
own call: the framework then runs as it is, without rljob's save on notice, and the bridge
says why in the progress record (`save_on_notice_unavailable`), which the head and the
operator read. It never breaks the user's import or loop.

The hooks use the frameworks' own save-and-stop paths; rljob writes nothing into their
checkpoint folders:
- RLinf: its runners call `rlinf.utils.runner_utils.check_progress(step, ...,
  save_interval, ..., run_time_exceeded=run_timer.is_finished())` after every step, save
  when it says so, and stop when their run timer is finished. After a notice the hook has
  `check_progress` say "save" for this step (with the validation the user's settings ask
  for, and no other), and the run timer (`rlinf.utils.timers.Timer`) say "finished", so
  RLinf saves this step and stops; the driver then exits 75. Right after the runner's own
  `_save_checkpoint` returns the hook reports the save and holds the loop until ray_node.py
  ends the driver, so a runner that does not stop on its timer (the embodied, async and
  offline runners pass `run_time_exceeded=False`) trains no further step; where a runner's
  `_save_checkpoint` is not as expected, that runner is held at its next `check_progress`.
  With `runner.save_interval <= 0` RLinf saves nothing, so a notice neither saves nor stops it.
- verl runs its loop in its TaskRunner, a Ray worker, with one of two trainers:
  - the V1 trainer (`trainer.use_v1=true`, verl 0.9's default): `PPOTrainer.fit` runs
    `step()` (rollout and update), then saves through `_save_checkpoint()` when its
    `save_freq` says so. After a notice the hook has `_save_checkpoint()` save the step that
    `step()` just finished, where verl's own rule would have (unless that rule saves it
    anyway);
  - the legacy trainer (`trainer.use_v1=false`): `RayPPOTrainer.fit` calls
    `should_save_ckpt_esi` (defined in `verl.utils.checkpoint.checkpoint_manager`, which
    the trainers import by name) after every actor update and saves when it returns True,
    which verl's own rule does when MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP is near
    and one step has finished. After a notice the hook sets that time a moment ahead
    before verl's check.
  Either way, right after verl's `_save_checkpoint` returns the hook reports the save and
  holds the loop until ray_node.py ends the driver (where a trainer overrides
  `_save_checkpoint`, at the step's `Tracking.log`). `Tracking.log` reports every training
  step (a log without the step's `timing_s/step`, such as the validation before training, is
  no step). Both need `trainer.save_freq > 0`
  (verl's default, -1, saves nothing), and the last step saves and ends the run by verl's
  own rule.
- OpenRLHF has no save on notice. With --ckpt.load_enable its actors and critics load the
  folder DeepSpeed's `latest` names, which a save cut short can leave naming a torn folder:
  the hook on `DeepspeedStrategy.load_ckpt` gives DeepSpeed the tag of the folder rljob chose
  (RLJOB_RESUME_DIR's name) where the caller gave none and the folder is there; otherwise, and
  where the hook is missing, OpenRLHF loads as it would (the worker's log says so).
The RLinf and verl hooks write the step each step finishes (and the step time) to
rljob-progress.json beside the step folders, from which the operator counts the steps a
restart lost. A hook that only makes the save on notice come sooner, and that finds the
framework other than it expects, is said there too (`save_on_notice_late`).
"""

from __future__ import annotations

import inspect
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

RLINF, VERL, OPENRLHF = "rlinf", "verl", "openrlhf"
VERL_EXPIRATION = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
# How far ahead of now the hook puts verl's expiration time: inside verl's window (a step
# plus a save) and still ahead of now when verl compares, a moment later.
VERL_EXPIRATION_AHEAD_SECONDS = 1.0
VERL_STEP_TIME = "timing_s/step"  # in the metrics of every training step verl logs
VERL_SAVE_TIME = "timing_s/save_checkpoint"  # and of each step that saved (part of the step's)


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
        self.notice_file = notice_file if save_on_notice else None  # spec.ray.saveOnNotice
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.attempt = int(attempt) if attempt and attempt.isdigit() else None
        self.step_ended: float | None = None
        self.clock = progress.StepClock()  # when this attempt's first and latest step ended
        self.step_seconds: list[float] = []  # the steps' own times, without their saves
        self.save_seconds: list[float] = []  # the saves' times, where the framework says them
        self.with_save: list[float] = []  # RLinf: the times between steps that held a save
        self.saved_last_step = False  # RLinf: the step before this one saved
        self.saving_on_notice: int | None = None  # the step the framework saves on notice
        self.last_saved: int | None = None  # verl: the step its own last (synchronous) save held
        self.unavailable: dict[str, list[str]] = {}  # framework -> why, in the order found
        self.late: dict[str, list[str]] = {}  # framework -> why its save on notice comes later
        self.save_paths_seen: set[str] = set()  # frameworks whose save-on-notice hook ran
        self.rlinf_save_interval: object = None  # as RLinf's check_progress was last given
        self.timer_forced = False  # RLinf's run timer said "finished" for rljob's notice
        self.framework = RLINF  # whose loop reported a step in this process
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
        if framework == VERL and VERL not in self.save_paths_seen:
            whys.append(
                f"{version_of(VERL)}: the step ran through neither the V1 PPOTrainer.step nor "
                "the legacy trainer's should_save_ckpt_esi, where rljob saves on notice"
            )
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


# --------------------------------------------------------------------------- RLinf
def wrap_check_progress(
    check_progress: Callable[..., Any], loop: Loop = LOOP, hold: Callable[[], Any] = HOLD
):
    """RLinf's check_progress(step, max_steps, val_check_interval, save_interval, ...,
    run_time_exceeded=...), which also reports each step and, on notice, has RLinf save.

    The reasoning runners return once they saved; the next call, in a runner that goes on,
    means the save is done: report it and hold the loop until the driver is ended.
    """
    signature = inspect.signature(check_progress)

    def checked(*args: Any, **kwargs: Any):
        if loop.saving_on_notice is not None:
            report_saved(loop, hold)
        try:
            call = signature.bind(*args, **kwargs)
            step, save_interval = call.arguments["step"], call.arguments["save_interval"]
            loop.save_paths_seen.add(RLINF)
            loop.rlinf_save_interval = save_interval
            if not positive(save_interval):
                loop.cannot_save(RLINF, f"runner.save_interval is {save_interval}: RLinf "
                                        "saves no checkpoint")  # fmt: skip
            if loop.timer_forced:  # rljob's notice, not RLinf's time limit: no forced validation
                call.arguments["run_time_exceeded"] = False
            loop.finished(step, RLINF, measure=True)
            args, kwargs = call.args, call.kwargs
        except Exception as exc:
            failed(loop, RLINF, exc)
            return check_progress(*args, **kwargs)
        result = check_progress(*args, **kwargs)
        loop.saved_last_step = bool(result[1])
        if not loop.notice() or not loop.can_save(RLINF):
            return result
        run_val, _, is_train_end = result
        if is_train_end:
            return result  # RLinf saves the last step and ends the run itself
        loop.saving_on_notice = step
        loop.saved_last_step = True
        print(f"rljob: notice: RLinf saves step {step} and stops", flush=True)
        return run_val, True, is_train_end

    return checked


def wrap_timer_is_finished(is_finished: Callable[[Any], bool], loop: Loop = LOOP):
    """RLinf's run timer, finished on notice as when its time limit is reached, where RLinf
    will save first (else a notice would end the run early, as if it had succeeded)."""

    def finished(self: Any) -> bool:
        done = is_finished(self)
        if done or not loop.notice() or not loop.can_save(RLINF):
            return done
        if loop.rlinf_save_interval is not None and not positive(loop.rlinf_save_interval):
            return False  # saves are off (unknown before the first step's check_progress)
        loop.timer_forced = True
        return True

    return finished


def wrap_rlinf_save_checkpoint(
    save: Callable[..., Any], loop: Loop = LOOP, hold: Callable[[], Any] = HOLD
):
    """An RLinf runner's own `_save_checkpoint` (which waits for its workers' saves): where it
    saved the step the bridge asked for, report the save and hold the loop as soon as it
    returns, before the runner's next step."""

    def saved(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = save(self, *args, **kwargs)
        # The reasoning runners count in `global_steps`, the embodied and offline ones in
        # `global_step`.
        step = getattr(self, "global_steps", getattr(self, "global_step", None))
        if isinstance(step, int) and loop.saving_on_notice == step:
            report_saved(loop, hold)
        return result

    return saved


# --------------------------------------------------------------------------- verl
def wrap_should_save_ckpt_esi(should_save: Callable[..., bool], loop: Loop = LOOP):
    """verl's should_save_ckpt_esi, with its expiration time set a moment ahead on notice."""

    def should_save_ckpt_esi(*args: Any, **kwargs: Any) -> bool:
        loop.save_paths_seen.add(VERL)
        if loop.notice() and loop.saving_on_notice is None and loop.can_save(VERL):
            os.environ[VERL_EXPIRATION] = str(time.time() + VERL_EXPIRATION_AHEAD_SECONDS)
            fired = should_save(*args, **kwargs)
            if fired:
                loop.saving_on_notice = -1  # verl saves now; its step comes with the log
                print("rljob: notice: verl saves this step (ESI)", flush=True)
            return fired
        return should_save(*args, **kwargs)

    return should_save_ckpt_esi


def saves_asynchronously(trainer: Any) -> bool:
    """verl's `actor_rollout_ref.actor.checkpoint.async_save` (Megatron's asynchronous
    checkpointing): verl's `_save_checkpoint` then returns before the shards are written, and
    nothing on the driver says when they are."""
    try:
        checkpoint = trainer.config.actor_rollout_ref.actor.get("checkpoint") or {}
        return checkpoint.get("async_save", False) is True
    except Exception:  # a trainer without that setting saves synchronously
        return False


ASYNC_SAVE = (
    "actor_rollout_ref.actor.checkpoint.async_save is on: verl's save returns before its "
    "shards are written and never says when they are, so no save on notice can be reported "
    "complete (rljob resumes from the newest complete folder)"
)


def v1_saves_on_notice(trainer: Any, loop: Loop) -> bool:
    """Whether the bridge must have verl's V1 trainer save the step it just finished."""
    loop.save_paths_seen.add(VERL)
    save_freq = trainer.config.trainer.save_freq
    if not positive(save_freq):
        loop.cannot_save(VERL, f"trainer.save_freq is {save_freq}: verl saves no checkpoint")
    if saves_asynchronously(trainer):
        loop.cannot_save(VERL, f"{version_of(VERL)}: {ASYNC_SAVE}")
    if not loop.notice() or loop.saving_on_notice is not None or not loop.can_save(VERL):
        return False
    step = trainer.global_steps
    if step >= trainer.total_training_steps:
        return False  # the last step: verl saves it and ends the run itself
    loop.saving_on_notice = step
    print(f"rljob: notice: verl saves step {step}", flush=True)
    return step % save_freq != 0  # else verl's periodic save of this step comes next


def v1_saved_already(trainer: Any, loop: Loop) -> bool:
    """On notice before a step: whether verl's own save of the step before it (a periodic
    save, just before the notice came) is the save on notice. Then no step more is trained
    and nothing is saved twice."""
    if not loop.notice() or loop.saving_on_notice is not None or not loop.can_save(VERL):
        return False
    if loop.last_saved is None or loop.last_saved != trainer.global_steps - 1:
        return False
    loop.saving_on_notice = loop.last_saved
    print(f"rljob: notice: verl saved step {loop.last_saved} just before it", flush=True)
    return True


def wrap_v1_step(step: Callable[..., Any], loop: Loop = LOOP, hold: Callable[[], Any] = HOLD):
    """verl's V1 PPOTrainer.step (one step's rollout and update). On notice, once the step is
    done, verl's own `_save_checkpoint` saves it, unless verl's save rule is about to; the
    save is reported, and the loop held, as soon as it returns (no validation or logging of
    the step first). A notice that finds the step before saved already is reported before the
    next step runs."""

    def stepped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            saved = v1_saved_already(self, loop)
        except Exception as exc:
            failed(loop, VERL, exc)
            saved = False
        if saved:
            report_saved(loop, hold)
        batch = step(self, *args, **kwargs)
        try:
            save = v1_saves_on_notice(self, loop)
        except Exception as exc:
            failed(loop, VERL, exc)
            return batch
        if save:
            self._save_checkpoint()
            report_saved(loop, hold)
        return batch

    return stepped


def wrap_save_checkpoint(
    save: Callable[..., Any], loop: Loop = LOOP, hold: Callable[[], Any] = HOLD
):
    """verl's trainers' own `_save_checkpoint`: where it saves the step the bridge asked for
    (verl's periodic save of that step, or the legacy trainer's ESI save), report the save and
    hold the loop as soon as it returns, before the step's validation and log. An
    asynchronous save is never reported: save on notice is off from then on, and says why."""

    def saved(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = save(self, *args, **kwargs)
        step = getattr(self, "global_steps", None)
        if not isinstance(step, int):
            return result
        asynchronous = saves_asynchronously(self)
        if not asynchronous:
            loop.last_saved = step
        if loop.saving_on_notice in (step, -1):
            if asynchronous:
                loop.cannot_save(VERL, f"{version_of(VERL)}: {ASYNC_SAVE}")
                loop.framework = VERL
                loop.write(step, progress.RUNNING)  # the head reads why, and stops waiting
            else:
                loop.saving_on_notice = step
                report_saved(loop, hold)
        return result

    return saved


def wrap_tracking_log(log: Callable[..., Any], loop: Loop = LOOP, hold: Callable[[], Any] = HOLD):
    """verl's Tracking.log, called at the end of every training step with the step: report
    it, and after a save on notice, report that and hold the loop until the driver is ended."""
    signature = inspect.signature(log)

    def logged(*args: Any, **kwargs: Any) -> Any:
        result = log(*args, **kwargs)
        try:
            call = signature.bind(*args, **kwargs)
            data, step = call.arguments["data"], call.arguments["step"]
            if not isinstance(data, dict) or VERL_STEP_TIME not in data:
                return result  # not a training step's metrics: the validation before training
            seconds, save = data[VERL_STEP_TIME], data.get(VERL_SAVE_TIME)
            loop.finished(step, VERL, seconds if positive(seconds) else None,
                          save_seconds=save if positive(save) else None)  # fmt: skip
        except Exception as exc:
            failed(loop, VERL, exc)
            return result
        if loop.saving_on_notice is not None:
            loop.saving_on_notice = step
            report_saved(loop, hold)
        return result

    return logged


# --------------------------------------------------------------------------- OpenRLHF
def chosen_tag(load_dir: object) -> str | None:
    """The folder rljob chose to resume from (RLJOB_RESUME_DIR's name, `global_stepN`), where
    `load_dir` (`_actor` or `_critic`) holds one of that name."""
    resume = os.environ.get(contract.ENV_RESUME_DIR)
    if not resume or not isinstance(load_dir, (str, os.PathLike)):
        return None
    tag = Path(resume).name
    if not (Path(load_dir) / tag).is_dir():
        print(f"rljob: {load_dir} has no {tag}, the folder rljob chose; OpenRLHF loads the one "
              "DeepSpeed's latest names", file=sys.stderr, flush=True)  # fmt: skip
        return None
    return tag


def wrap_load_ckpt(load_ckpt: Callable[..., Any], loop: Loop = LOOP):
    """OpenRLHF's DeepspeedStrategy.load_ckpt(model, load_dir, tag=None, ...), which its actors
    and critics call under --ckpt.load_enable: without a tag DeepSpeed loads the folder its
    `latest` names, which a save cut short can leave naming a torn folder. Give it the tag of
    the folder rljob chose, the newest complete one; a tag the caller gave is left alone."""
    signature = inspect.signature(load_ckpt)

    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            call = signature.bind(*args, **kwargs)
            tag = (
                None
                if call.arguments.get("tag") is not None
                else chosen_tag(call.arguments["load_dir"])
            )
            if tag is not None:
                call.arguments["tag"] = tag
                print(f"rljob: OpenRLHF loads {tag}, the checkpoint rljob chose, from "
                      f"{call.arguments['load_dir']}", flush=True)  # fmt: skip
                args, kwargs = call.args, call.kwargs
        except Exception as exc:
            failed(loop, OPENRLHF, exc)
        return load_ckpt(*args, **kwargs)

    return load


RLINF_HELD_LATER = "the loop is held only at the runner's next check_progress, a step later"
VERL_REPORTED_LATER = "the save on notice is reported only at the step's log, after its validation"
RLINF_RUNNERS = (  # (module, class) of the RL runners; subclasses inherit the hook
    ("rlinf.runners.reasoning_runner", "ReasoningRunner"),  # and the agent runners
    ("rlinf.runners.coding_online_rl_runner", "CodingOnlineRLRunner"),
    ("rlinf.runners.embodied_runner", "EmbodiedRunner"),  # and the async embodied runners
    ("rlinf.runners.offline_runner", "OfflineRunner"),
)
HOOKS: tuple[Hook, ...] = (
    Hook(RLINF, "rlinf.utils.runner_utils", "check_progress", wrap_check_progress,
         ("step", "save_interval", "run_time_exceeded")),
    Hook(RLINF, "rlinf.utils.timers", "Timer.is_finished", wrap_timer_is_finished,
         later="RLinf's reasoning runners do not stop on their run timer after the save on "
               f"notice, and {RLINF_HELD_LATER}"),
    *(Hook(RLINF, module, f"{runner}._save_checkpoint", wrap_rlinf_save_checkpoint,
           later=RLINF_HELD_LATER) for module, runner in RLINF_RUNNERS),
    Hook(VERL, "verl.utils.checkpoint.checkpoint_manager", "should_save_ckpt_esi",
         wrap_should_save_ckpt_esi),
    Hook(VERL, "verl.trainer.ppo.v1.trainer_base", "PPOTrainer.step", wrap_v1_step),
    Hook(VERL, "verl.trainer.ppo.v1.trainer_base", "PPOTrainer._save_checkpoint",
         wrap_save_checkpoint, later=VERL_REPORTED_LATER),
    Hook(VERL, "verl.trainer.ppo.ray_trainer", "RayPPOTrainer._save_checkpoint",
         wrap_save_checkpoint, later=VERL_REPORTED_LATER),
    Hook(VERL, "verl.utils.tracking", "Tracking.log", wrap_tracking_log, ("data", "step")),
    Hook(OPENRLHF, "openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.load_ckpt",
         wrap_load_ckpt, ("load_dir", "tag")),
)  # fmt: skip


def install(hooks: tuple[Hook, ...] = HOOKS, loop: Loop = LOOP) -> None:
    """Hook the frameworks' modules in this process (once; those imported already now)."""
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
    if loop.timer_forced and code in (0, None):  # stopped by rljob's notice, before any save
        why = loop.why_unavailable(RLINF)
        loop.stopped_without_save = why or "RLinf stopped on its run timer without a save"
        return 128 + signal.SIGTERM  # not 0: RLinf did not finish its steps
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


if os.environ.get(contract.ENV_NOTICE_FILE):
    install()
