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
  (world rank 0), and the ranks agree, with one all_reduce(MAX), whether any of them has a
  notice: SIGTERM (torchrun passes the pod's on) or the operator's checkpoint request, which
  a downward-API file projects. If one has, it sets `should_save` and `should_training_stop`,
  so the Trainer saves this step through its own `_save_checkpoint` (output_dir/checkpoint-N,
  with the optimizer, scheduler, RNG and trainer state it always saves);
- once that save returns (`on_save`), the ranks wait for each other and every worker exits
  75 (EXIT_CHECKPOINTED_ON_REQUEST), with the termination message the operator reads (torchrun
  exits 1 and hides the code): nothing after `trainer.train()` runs, so a stopped run is never
  saved or pushed as if it were final. A notice that comes during a periodic save is agreed
  at that save's end, which is then the one the run stops with.
A step in progress is never cut short: a notice waits for the step's end (and the Trainer's
logging and evaluation, if due at that step) and its save. Where that takes longer than the
pod's grace period, the save is killed half-written, rljob passes the torn folder over, and
the run goes back to its last periodic save.

A guest's rules (rljob_guest): `Trainer.__init__` and `add_callback` are checked before they
are used; anything unexpected, or a failure inside the callback, leaves the Trainer as it is
(no save on notice) and says why in the progress record, which the operator shows in the
SaveOnNotice condition. A failure on one rank turns it off on every rank at the ranks' next
agreement, which every rank joins whatever failed in its own part of the callback: one that
skipped it would leave the others waiting in it, and the Trainer's collectives out of step.
SIGTERM is taken over only while a Trainer trains; before and after it ends the process as it
would have (or runs the handler the program had installed).
"""

from __future__ import annotations

import contextlib
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

    def __init__(self, request_file: str | None, checkpoint_dir: str | None, attempt: str | None):
        self.request_file = Path(request_file) if request_file else None
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.attempt = int(attempt) if attempt and attempt.isdigit() else None
        self.signalled: str | None = None
        self.requested: str | None = None
        self.training = False  # a Trainer's train() runs: SIGTERM is a notice
        self.previous_handler: Any = signal.SIG_DFL
        self.unavailable: list[str] = []
        self.late: list[str] = []
        self.step_ended: float | None = None
        self.save_started: float | None = None
        self.step_seconds: list[float] = []
        self.save_seconds: list[float] = []
        self.last_step: int | None = None  # the last step this process saw finish
        self.saving_on_notice: int | None = None  # the step the Trainer saves on notice
        self.stopped_on_notice = False  # the ranks agreed to stop: exit 75 once it is saved
        self.off_everywhere = False  # the ranks agreed that one is off: no more agreements

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

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = signal.Signals(signum).name
        previous = self.previous_handler
        if callable(previous):
            previous(signum, frame)
        elif not self.training and previous == signal.SIG_DFL:  # nothing to save: go as before
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

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
        self.step_ended, self.save_started, self.last_step = now, None, step
        if world_zero:
            self.write(step, progress.RUNNING)

    def saved(self) -> None:
        if self.save_started is not None:
            self.save_seconds.append(time.monotonic() - self.save_started)

    def write(self, step: int | None, status: str) -> None:
        if self.checkpoint_dir is None:
            return
        why = "; ".join(self.unavailable) or None
        late = "; ".join(self.late) or None
        record = progress.progress_record(
            step or 0, self.attempt, status, mean(self.step_seconds), why,
            mean(self.save_seconds), late,
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
)


def agree(local: bool, off: bool, device: Any) -> tuple[bool, bool]:
    """Whether any rank has a notice, and whether any rank's save on notice is off (one
    all_reduce(MAX) where there is more than one rank)."""
    import torch  # the Trainer's: imported before any Trainer exists
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local, off
    flags = torch.tensor([int(local), int(off)], dtype=torch.int32, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return bool(flags[0].item()), bool(flags[1].item())


def agreed(notice: Notice, local: bool, device: Any) -> bool:
    """Whether the ranks agree that there is a notice. Every rank whose Trainer calls back
    takes part, whatever failed in its own part of the callback: a rank that skipped the
    collective would leave the others waiting in it, and meet them in the Trainer's next
    one. Where any rank's save on notice is off, it is off on every rank from then on, and
    no rank asks the others again."""
    anyone, off = agree(local, bool(notice.unavailable), device)
    if off:
        notice.off_everywhere = True
        if not notice.unavailable:
            notice.cannot_save(TRANSFORMERS, "it is off on another rank (see that rank's log)")
        return False
    return anyone


def wait_for_all_ranks() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def stop_saved(notice: Notice, step: int, world_zero: bool) -> None:
    """Every rank's part of checkpoint-`step` is written: tell the operator, and exit 75."""
    wait_for_all_ranks()
    if world_zero:
        notice.write(step, progress.CHECKPOINTED_ON_REQUEST)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        tell_the_operator(f"{contract.CHECKPOINTED_ON_REQUEST_MESSAGE}: saved step {step} "
                          "through the Trainer")  # fmt: skip
    print(f"rljob: saved step {step} on notice (checkpoint-{step}); exiting with "
          f"{contract.EXIT_CHECKPOINTED_ON_REQUEST}", file=sys.stderr, flush=True)  # fmt: skip
    raise SystemExit(contract.EXIT_CHECKPOINTED_ON_REQUEST)


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
            notice.training = True
            notice.step_ended = time.monotonic()

        def on_train_end(self, args, state, control, **kwargs):
            notice.training = False
            if notice.stopped_on_notice:  # the save was skipped (save_strategy "best")
                print("rljob: the Trainer stopped on notice without saving it", file=sys.stderr,
                      flush=True)  # fmt: skip
                raise SystemExit(128 + signal.SIGTERM)  # not 0: the run did not finish
            if state.is_world_process_zero and not notice.unavailable:
                notice.write(state.global_step, progress.FINISHED)

        def on_step_end(self, args, state, control, **kwargs):
            local = False
            try:
                notice.finished(state.global_step, state.is_world_process_zero)
                local = notice.local()
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
            if notice.off_everywhere:
                return control
            try:
                if agreed(notice, local, args.device):
                    notice.stopped_on_notice = True
                    notice.saving_on_notice = state.global_step
                    control.should_save = True
                    control.should_training_stop = True
                if control.should_save:
                    notice.save_started = time.monotonic()
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
            return control

        def on_save(self, args, state, control, **kwargs):
            local = False
            try:
                notice.saved()
                local = notice.local()
            except Exception as exc:
                notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
            if notice.off_everywhere:
                return control
            # A notice during a periodic save: that save is the one to stop with. The ranks
            # agreed on the step they stop at, so they all skip this or none does.
            if notice.saving_on_notice is None:
                try:
                    if agreed(notice, local, args.device):
                        notice.stopped_on_notice = True
                        notice.saving_on_notice = state.global_step
                except Exception as exc:
                    notice.cannot_save(TRANSFORMERS, f"rljob's callback failed: {exc!r}")
                    return control
            if notice.saving_on_notice is not None:
                stop_saved(notice, notice.saving_on_notice, state.is_world_process_zero)
            return control

    return RljobNotice


def wrap_trainer_init(init: Any, notice: Notice = NOTICE) -> Any:
    """Trainer.__init__: once the Trainer is made, add rljob's callback and take SIGTERM."""

    def initialised(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if notice.unavailable:
            return
        try:
            from transformers.trainer_callback import TrainerCallback

            self.add_callback(callback_class(TrainerCallback, notice)())
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
