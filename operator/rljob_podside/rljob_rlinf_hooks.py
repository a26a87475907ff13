"""rljob's hooks into RLinf's loop (save on notice, and progress), installed by
rljob_ray_bridge.py, beside which a Ray job of RLinf ships them.

RLinf's runners call `rlinf.utils.runner_utils.check_progress(step, ..., save_interval, ...,
run_time_exceeded=run_timer.is_finished())` after every step, save when it says so, and stop
when their run timer is finished. After a notice the hook has `check_progress` say "save" for
this step (with the validation the user's settings ask for, and no other), and the run timer
(`rlinf.utils.timers.Timer`) say "finished", so RLinf saves this step and stops; the driver
then exits 75. Right after the runner's own `_save_checkpoint` returns the hook reports the
save and holds the loop until ray_node.py ends the driver, so a runner that does not stop on
its timer (the embodied, async and offline runners pass `run_time_exceeded=False`) trains no
further step; where a runner's `_save_checkpoint` is not as expected, that runner is held at
its next `check_progress`. With `runner.save_interval <= 0` RLinf saves nothing, so a notice
neither saves nor stops it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rljob_guest import Hook  # mounted beside this file
from rljob_ray_bridge import HOLD, LOOP, Loop, failed, positive, report_saved

RLINF = "rlinf"
STOPPED_BY_TIMER = "RLinf stopped on its run timer"


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
            loop.save_interval = save_interval
            if not positive(save_interval):
                loop.cannot_save(RLINF, f"runner.save_interval is {save_interval}: RLinf "
                                        "saves no checkpoint")  # fmt: skip
            if loop.stopped_by_notice:  # rljob's notice, not a time limit: no forced validation
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
        if loop.save_interval is not None and not positive(loop.save_interval):
            return False  # saves are off (unknown before the first step's check_progress)
        loop.stopped_by_notice = (RLINF, STOPPED_BY_TIMER)
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


RLINF_HELD_LATER = "the loop is held only at the runner's next check_progress, a step later"
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
)  # fmt: skip
