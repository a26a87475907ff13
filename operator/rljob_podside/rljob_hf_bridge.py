"""rljob's bridge into Hugging Face's Trainer (TRL's trainers run on it): save on notice, and
progress.

Under rljob a `framework: trl` pod runs `torchrun ... rljob_hf_bridge.py SCRIPT ARGS...` (or
`-m MODULE ARGS...`): every torchrun worker starts here, hooks `transformers.trainer` once it
is imported, and runs the user's program as Python would. The user's code does not change.
Standard library, the mounted rljob_contract and rljob_guest only at import; torch only
inside the Trainer's own calls, where the Trainer has imported it.

The hook adds one TrainerCallback to every Trainer the program makes (GRPOTrainer and the
rest call `Trainer.__init__`), through the Trainer's public `add_callback`:
- at every step's end (`on_step_end`, after the Trainer's own flow callback, before its save)
  it writes the step and the step time to rljob-progress.json beside the checkpoint folders
  (world rank 0), and the ranks agree whether any of them has a notice: SIGTERM (torchrun
  passes the pod's on) or the operator's checkpoint request, which a downward-API file
  projects. If one has, it sets `should_save` and `should_training_stop`, so the Trainer
  saves this step through its own `_save_checkpoint` (output_dir/checkpoint-N, with the
  optimizer, scheduler, RNG and trainer state it always saves);
- once that save returns (`on_save`), the ranks wait for each other and every worker exits
  75 (EXIT_CHECKPOINTED_ON_REQUEST), with the termination message the operator reads (torchrun
  exits 1 and hides the code): nothing after `trainer.train()` runs, so a stopped run is never
  saved or pushed as if it were final;
- a notice that comes after the step's agreement, while the Trainer logs, evaluates or saves
  that step, is agreed at the next step's start (`on_step_begin`): where every rank saved the
  step just before, that save is the one the run stops with (exit 75 there, no step more);
  else the next step's end saves on notice;
- where the Trainer skips the save the ranks agreed on (save_strategy "best" saves a new best
  only), every worker stops all the same, at the epoch's end (`on_epoch_end`), with exit 143
  and the stopped-on-notice termination message: the operator counts a preemption, not a
  failure, and the restart goes back to the last save.
A step in progress is never cut short: a notice waits for the step's end (and the Trainer's
logging and evaluation, if due at that step) and its save. Where that takes longer than the
pod's grace period, the save is killed half-written, rljob passes the torn folder over, and
the run goes back to its last periodic save.

The ranks' agreement is a collective (one all_reduce(MAX) of a few flags), so it is held only
where every rank's Trainer calls back in step with the others, whatever each rank's own state:
at every step's end, and at the next step's start where every rank knows alike that a save may
have come between (the step's agreement found a rank that was to save, or an epoch ended).
`on_save` holds none: the Trainer may call it on one rank alone (a user's callback that sets
`should_save` on rank 0 only is valid under plain DDP), and a collective there would pair
with another rank's next one (a gloo error, an NCCL hang). Whether every rank saved a step is
a flag of the agreement after it. The one collective outside the agreements is the barrier
before exit 75, in `on_save` of the step the ranks agreed to stop at: rljob set `should_save`
there on every rank, after the other callbacks, and the Trainer saves it on every rank (or,
with save_strategy "best", on none, and every rank stops at the epoch's end instead).
Every Trainer the program makes gets the callback on every rank, whatever an earlier Trainer
met on one of them, so that its agreements are the same on every rank.

The Trainer's DataLoader workers (`dataloader_num_workers` > 0) leave torchrun's process group
as they start (`os.setpgid`, in torch's `_worker_loop`): torchrun stops a worker with
`os.killpg`, and torch's workers die of a SIGTERM that their parent did not send, which fails
the step in progress and, with it, the save on notice. They still exit when their parent
does (torch's own watchdog, its SIGTERM at exit) and when the pod ends. A worker started
another way than by fork (spawn or forkserver, the default from Python 3.14) runs torch's
code as it is: with such workers save on notice is off, and the record says why.

A guest's rules (rljob_guest): `Trainer.__init__`, `add_callback` and torch's `_worker_loop`
are checked before they are used; anything unexpected, or a failure inside the callback,
leaves the Trainer as it is (no save on notice) and says why in the progress record, which the
operator shows in the SaveOnNotice condition. A failure on one rank turns it off on every
rank at the ranks' next agreement, which every rank joins whatever failed in its own part of
the callback: one that skipped it would leave the others waiting in it, and the Trainer's
collectives out of step.
With RLJOB_SAVE_ON_NOTICE=false (spec.saveOnNotice) the callback reports the steps and saves
nothing on notice, and the record says so.
SIGTERM is held as a notice only while the bridge can act on it: while a Trainer trains,
with save on notice on and an agreement still to come. Otherwise (before and after a Trainer
trains, with save on notice off, after the last agreement) it ends the process as it would
have without the bridge, or runs the handler the program had installed; a SIGTERM held when
that turns out ends the process there.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import rljob_contract as contract
import rljob_guest
from rljob_contract import progress
from rljob_guest import Hook, run_program, version_of

TRANSFORMERS = "transformers"


class Notice:
    """What this process knows: the notice (SIGTERM or the request file), the steps and
    saves, and why a save on notice is unavailable or late here."""

    def __init__(
        self,
        request_file: str | None,
        checkpoint_dir: str | None,
        attempt: str | None,
        save_on_notice: bool = True,
    ):
        self.save_on_notice = save_on_notice  # spec.saveOnNotice
        self.request_file = Path(request_file) if request_file else None
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.attempt = int(attempt) if attempt and attempt.isdigit() else None
        self.signalled: str | None = None
        self.requested: str | None = None
        self.held = False  # a SIGTERM of default effect, held as a notice
        self.previous_handler: Any = signal.SIG_DFL
        self.unavailable: list[str] = []
        self.late: list[str] = []
        self.step_ended: float | None = None
        self.save_started: float | None = None
        self.step_seconds: list[float] = []
        self.save_seconds: list[float] = []
        self.last_step: int | None = None  # the last step this process saw finish
        self.clock = progress.StepClock()  # when this attempt's first and latest step ended
        self.off_everywhere = False  # the ranks agreed that one is off: no more agreements
        self.workers_unhooked: str | None = None  # why DataLoader workers stay in the group
        self.workers_hook_tried = False
        self.new_run()

    def new_run(self) -> None:
        """A Trainer's train() starts (or none runs yet): its own agreements."""
        self.training = False  # a Trainer's train() runs
        self.agreements_over = False  # this train() will hold no agreement more
        self.agree_at_step_begin = False  # the ranks agree at the next step's start
        self.saved_step: int | None = None  # the step of this rank's last save
        self.saving_on_notice: int | None = None  # the step the Trainer saves on notice
        self.stopped_on_notice = False  # the ranks agreed to stop: exit once it is saved

    # -- the guest's record (rljob_guest.Guest)
    def cannot_save(self, framework: str, why: str) -> None:
        """Off in this process, and said at once in the progress record (by world rank 0),
        which claims no step it has not seen finish."""
        if why not in self.unavailable:
            self.unavailable.append(why)
            print(f"rljob: save on notice unavailable: {why}; the Trainer runs as it is, and a "
                  "preemption goes back to its last periodic save", file=sys.stderr,
                  flush=True)  # fmt: skip
            if os.environ.get("RANK", "0") == "0":
                self.write(self.last_step, progress.RUNNING)
        self.let_go_unless_acting()

    def saves_later(self, framework: str, why: str) -> None:
        if why not in self.late:
            self.late.append(why)
            print(f"rljob: {why}", file=sys.stderr, flush=True)

    # -- the notice
    def take_sigterm(self) -> None:
        """Handle SIGTERM from now on (once), keeping the program's own handler to pass on."""
        current = signal.getsignal(signal.SIGTERM)
        if current != self.on_sigterm:
            self.previous_handler = current
            signal.signal(signal.SIGTERM, self.on_sigterm)

    def acting(self) -> bool:
        """Whether a SIGTERM now leads to a save on notice: a Trainer trains, save on notice
        is on, and the ranks will agree again (or have agreed to stop)."""
        if self.stopped_on_notice:
            return True
        return (self.training and not self.agreements_over and not self.unavailable
                and not self.off_everywhere)  # fmt: skip

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = signal.Signals(signum).name
        previous = self.previous_handler
        if callable(previous):  # the program's own handler runs, as it would have
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            self.held = True
            self.let_go_unless_acting()

    def let_go_unless_acting(self) -> None:
        """A held SIGTERM that the bridge will not act on ends the process now, as SIGTERM
        would have without the bridge."""
        if self.held and not self.acting():
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except ValueError:  # not the main thread: at the Trainer's end at the latest
                return
            print("rljob: SIGTERM, and no save on notice to make: the process ends as it would "
                  "have without rljob", file=sys.stderr, flush=True)  # fmt: skip
            os.kill(os.getpid(), signal.SIGTERM)

    def no_more_agreements(self) -> None:
        """The Trainer's loop ends without another agreement of the ranks."""
        if not self.stopped_on_notice:
            self.agreements_over = True
            self.let_go_unless_acting()

    def local(self) -> bool:
        """Whether this process has a notice: SIGTERM, or a request in the projected file."""
        if self.requested is None and self.request_file is not None:
            try:
                value = self.request_file.read_text().strip()
            except OSError:
                value = ""  # not projected (yet): no request
            if value:  # any value is a request; a step's end is the only deadline kept here
                self.requested = f"checkpoint request {value!r}"
        return bool(self.signalled or self.requested)

    # -- progress
    def finished(self, step: int, world_zero: bool) -> None:
        now = time.monotonic()
        if self.step_ended is not None and self.save_started is None:
            self.step_seconds.append(now - self.step_ended)
        if self.last_step is None:  # this container's first step: its pod turns Ready
            progress.mark_trained()
        self.clock.stepped()
        self.step_ended, self.save_started, self.last_step = now, None, step
        if world_zero:
            self.write(step, progress.RUNNING)

    def saved(self, step: int) -> None:
        self.saved_step = step
        if self.save_started is not None:
            self.save_seconds.append(time.monotonic() - self.save_started)

    def write(self, step: int | None, status: str) -> None:
        if self.checkpoint_dir is None:
            return
        why = "; ".join(self.unavailable) or None
        late = "; ".join(self.late) or None
        record = progress.progress_record(
            step or 0, self.attempt, status, mean(self.step_seconds), why,
            mean(self.save_seconds), late, self.clock,
        )  # fmt: skip
        record[progress.STEP] = step  # None before the first step: no step is claimed
        try:
            progress.write_progress(
                self.checkpoint_dir, record, progress.FRAMEWORK_PROGRESS_FILE_NAME
            )
        except OSError as exc:  # the record is rljob's, the run is the user's
            print(f"rljob: cannot write the progress record: {exc}", file=sys.stderr, flush=True)


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


NOTICE = Notice(
    os.environ.get(contract.ENV_CHECKPOINT_REQUEST_FILE),
    os.environ.get(contract.ENV_CHECKPOINT_DIR),
    os.environ.get(contract.ENV_ATTEMPT),
    os.environ.get(contract.ENV_SAVE_ON_NOTICE, "true") != "false",
)
SAVE_ON_NOTICE_OFF = "spec.saveOnNotice is false"


def agree(flags: list[bool], device: Any) -> list[bool]:
    """Each flag, true where it is true on any rank (one all_reduce(MAX) where there is more
    than one rank)."""
    import torch  # the Trainer's: imported before any Trainer exists
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flags
    tensor = torch.tensor([int(flag) for flag in flags], dtype=torch.int32, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [bool(value) for value in tensor.tolist()]


def agreed(notice: Notice, local: bool, device: Any, other: bool = False) -> tuple[bool, bool]:
    """Whether the ranks agree that there is a notice, and whether `other` is true on any
    rank. Every rank whose Trainer calls back takes part, whatever failed in its own part of
    the callback: a rank that skipped the collective would leave the others waiting in it,
    and meet them in the Trainer's next one. Where any rank's save on notice is off, it is
    off on every rank from then on, and no rank asks the others again."""
    anyone, off, any_other = agree([local, bool(notice.unavailable), other], device)
    if off:
        notice.off_everywhere = True
        if not notice.unavailable:
            notice.cannot_save(TRANSFORMERS, "it is off on another rank (see that rank's log)")
        notice.let_go_unless_acting()
        return False, any_other
    return anyone, any_other


def wait_for_all_ranks() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def stop_saved(notice: Notice, step: int, world_zero: bool) -> None:
    """Every rank's part of checkpoint-`step` is written: tell the operator, and exit 75."""
    if world_zero:
        notice.write(step, progress.CHECKPOINTED_ON_REQUEST)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        tell_the_operator(f"{contract.CHECKPOINTED_ON_REQUEST_MESSAGE}: saved step {step} "
                          "through the Trainer")  # fmt: skip
    print(f"rljob: saved step {step} on notice (checkpoint-{step}); exiting with "
          f"{contract.EXIT_CHECKPOINTED_ON_REQUEST}", file=sys.stderr, flush=True)  # fmt: skip
    raise SystemExit(contract.EXIT_CHECKPOINTED_ON_REQUEST)


def stop_unsaved(notice: Notice) -> None:
    """The ranks agreed to stop at a step that the Trainer then did not save (save_strategy
    "best" saves a new best only): stop all the same, as a stop on notice, never a failure."""
    step = notice.saving_on_notice
    message = (f"{contract.STOPPED_ON_NOTICE_MESSAGE} without a save: the Trainer did not save "
               f"step {step}, where the ranks stopped on notice (save_strategy \"best\" saves "
               "a new best only); a restart goes back to its last save")  # fmt: skip
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        tell_the_operator(message)
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.SIGTERM)  # not 0: the run did not finish


def tell_the_operator(message: str) -> None:
    """The container's termination message: torchrun hides the workers' exit codes."""
    explicit = os.environ.get(contract.ENV_TERMINATION_LOG)
    path = Path(explicit or contract.DEFAULT_TERMINATION_LOG)
    if not explicit and not path.exists():  # outside a container: nobody to tell
        return
    with contextlib.suppress(OSError):
        path.write_text(message + "\n")


def callback_class(base: type, notice: Notice) -> type:
    """rljob's TrainerCallback, on the Trainer's own base class. Every event is the Trainer's
    own call on every rank; an error of rljob's inside one turns the save on notice off."""

    class RljobNotice(base):  # type: ignore[misc, valid-type]
        def on_train_begin(self, args, state, control, **kwargs):
            notice.new_run()
            notice.training = True
            notice.step_ended = time.monotonic()
            try:
                why = workers_out_of_reach(args, notice)
                if why:
                    notice.cannot_save(TRANSFORMERS, why)
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")

        def on_train_end(self, args, state, control, **kwargs):
            progress.unmark_trained()  # the last step is done: ending is not training
            if notice.stopped_on_notice:  # the save was skipped (save_strategy "best")
                stop_unsaved(notice)
            notice.training = False
            notice.let_go_unless_acting()
            if state.is_world_process_zero and not notice.unavailable:
                notice.write(state.global_step, progress.FINISHED)

        def on_step_begin(self, args, state, control, **kwargs):
            """Agreed only where the last agreement (or an epoch's end) says so, the same on
            every rank: a notice since then stops with the save of the step before, where
            every rank saved it."""
            if not notice.agree_at_step_begin or notice.off_everywhere:
                return control
            notice.agree_at_step_begin = False
            local, unsaved = False, True
            try:
                local = notice.local()
                unsaved = notice.saved_step != state.global_step
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
            try:
                anyone, someone_unsaved = agreed(notice, local, args.device, unsaved)
                if anyone and not someone_unsaved:  # checkpoint-N is every rank's: stop there
                    notice.stopped_on_notice = True
                    notice.saving_on_notice = state.global_step
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
                return control
            if notice.stopped_on_notice:
                stop_saved(notice, state.global_step, state.is_world_process_zero)
            return control

        def on_step_end(self, args, state, control, **kwargs):
            local = False
            try:
                notice.finished(state.global_step, state.is_world_process_zero)
                local = notice.local()
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
            if not notice.off_everywhere:
                try:
                    anyone, saving = agreed(notice, local, args.device, bool(control.should_save))
                    if anyone:
                        notice.stopped_on_notice = True
                        notice.saving_on_notice = state.global_step
                        control.should_save = True
                        control.should_training_stop = True
                    # A notice during this step's save is agreed at the next step's start.
                    notice.agree_at_step_begin = saving and not anyone
                except Exception as exc:
                    notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
            if control.should_save:
                notice.save_started = time.monotonic()
            if control.should_training_stop:
                notice.no_more_agreements()
            return control

        def on_save(self, args, state, control, **kwargs):
            """No collective here but the barrier of the save the ranks agreed on, which the
            Trainer makes on every rank: it may call this on one rank alone."""
            try:
                notice.saved(state.global_step)
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
            if notice.stopped_on_notice and notice.saving_on_notice == state.global_step:
                wait_for_all_ranks()  # every rank's part of checkpoint-N is written
                stop_saved(notice, state.global_step, state.is_world_process_zero)
            if control.should_training_stop:
                notice.no_more_agreements()
            return control

        def on_log(self, args, state, control, **kwargs):
            if control.should_training_stop:  # a callback before this one stops the run
                notice.no_more_agreements()

        def on_evaluate(self, args, state, control, **kwargs):
            if control.should_training_stop:  # early stopping, say
                notice.no_more_agreements()

        def on_epoch_end(self, args, state, control, **kwargs):
            if notice.stopped_on_notice:  # the Trainer skipped the save the ranks agreed on
                stop_unsaved(notice)
            if control.should_training_stop:
                notice.no_more_agreements()
            elif not notice.off_everywhere:  # the Trainer may save at an epoch's end
                notice.agree_at_step_begin = True

    return RljobNotice


def workers_out_of_reach(args: Any, notice: Notice) -> str | None:
    """Why the Trainer's DataLoader workers would die of torchrun's SIGTERM to the process
    group, failing the save on notice; None where it has none or they leave the group."""
    workers = getattr(args, "dataloader_num_workers", 0)
    if not isinstance(workers, int) or workers <= 0:
        return None
    if notice.workers_unhooked:
        return f"dataloader_num_workers {workers}: {notice.workers_unhooked}"
    method = multiprocessing.get_start_method(allow_none=True)
    method = method or multiprocessing.get_all_start_methods()[0]  # the default, unchanged
    if method != "fork":
        return (f"dataloader_num_workers {workers}: DataLoader workers started by {method!r} "
                "run torch's code without rljob's, and die of torchrun's SIGTERM to the "
                "process group before the save")  # fmt: skip
    return None


def wrap_worker_loop(loop: Any, guest: Any = None) -> Any:
    """torch's DataLoader worker loop, in a worker that first leaves torchrun's process group.
    The wrapper bears torch's names, so a worker that is not forked unpickles torch's own."""

    @functools.wraps(loop)
    def worker_loop(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        return loop(*args, **kwargs)

    return worker_loop


WORKER_LOOP = Hook("torch", "torch.utils.data._utils.worker", "_worker_loop", wrap_worker_loop)


class Unhooked:
    """The guest of WORKER_LOOP: why it is not in place, judged once a Trainer trains (it
    matters only with DataLoader workers)."""

    def __init__(self, notice: Notice) -> None:
        self.notice = notice

    def cannot_save(self, framework: str, why: str) -> None:
        self.notice.workers_unhooked = f"{why}: its DataLoader workers die of torchrun's SIGTERM"

    saves_later = cannot_save


def hook_dataloader_workers(notice: Notice) -> None:
    """Once per process, before any Trainer trains (torch is imported by then)."""
    if notice.workers_hook_tried:
        return
    notice.workers_hook_tried = True
    try:
        module = importlib.import_module(WORKER_LOOP.module)
    except Exception as exc:
        Unhooked(notice).cannot_save("torch", f"{version_of('torch')}: {exc!r}")
        return
    WORKER_LOOP.apply(module, Unhooked(notice))


def wrap_trainer_init(init: Any, notice: Notice = NOTICE) -> Any:
    """Trainer.__init__: once the Trainer is made, add rljob's callback and take SIGTERM.
    Every Trainer gets it, whatever an earlier one met on this rank: the ranks' agreements
    are then the same on every rank (a rank whose save on notice is off says so in them)."""

    def initialised(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            from transformers.trainer_callback import TrainerCallback

            self.add_callback(callback_class(TrainerCallback, notice)())
            if not notice.save_on_notice:  # the steps are reported all the same
                notice.cannot_save(TRANSFORMERS, SAVE_ON_NOTICE_OFF)
            if getattr(getattr(self, "args", None), "save_only_model", False) is True:
                notice.cannot_save(TRANSFORMERS, "save_only_model is set: a checkpoint holds the "
                                   "weights alone, which no resume goes on from")  # fmt: skip
            hook_dataloader_workers(notice)
            notice.take_sigterm()
        except Exception as exc:
            notice.cannot_save(TRANSFORMERS, f"{version_of(TRANSFORMERS)}: the Trainer took no "
                               f"callback: {exc!r}")  # fmt: skip

    return initialised


HOOKS = (Hook(TRANSFORMERS, "transformers.trainer", "Trainer.__init__", wrap_trainer_init),)


def main(argv: list[str]) -> int:
    """Run the user's program with the hook on; its own exit code, or 75 after a save on
    notice (raised inside the Trainer's call, so nothing after `train()` runs)."""
    rljob_guest.install(HOOKS, NOTICE)
    code = run_program(argv)
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
