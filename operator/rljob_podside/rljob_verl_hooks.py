"""rljob's hooks into verl's loop (save on notice, and progress), installed by
rljob_ray_bridge.py, beside which a Ray job of verl ships them.

verl runs its loop in its TaskRunner, a Ray worker, with one of two trainers:
- the V1 trainer (`trainer.use_v1=true`, verl 0.9's default): `PPOTrainer.fit` runs `step()`
  (rollout and update), then saves through `_save_checkpoint()` when its `save_freq` says so.
  After a notice the hook has `_save_checkpoint()` save the step that `step()` just finished,
  where verl's own rule would have (unless that rule saves it anyway);
- the legacy trainer (`trainer.use_v1=false`): `RayPPOTrainer.fit` calls
  `should_save_ckpt_esi` (defined in `verl.utils.checkpoint.checkpoint_manager`, which the
  trainers import by name) after every actor update and saves when it returns True, which
  verl's own rule does when MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP is near and one
  step has finished. After a notice the hook sets that time a moment ahead before verl's
  check.
Either way, right after verl's `_save_checkpoint` returns the hook reports the save and holds
the loop until ray_node.py ends the driver (where a trainer overrides `_save_checkpoint`, at
the step's `Tracking.log`). `Tracking.log` reports every training step (a log without the
step's `timing_s/step`, such as the validation before training, is no step). Both need
`trainer.save_freq > 0` (verl's default, -1, saves nothing), and the last step saves and ends
the run by verl's own rule.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from typing import Any

from rljob_contract import progress
from rljob_guest import Hook, version_of  # mounted beside this file
from rljob_ray_bridge import HOLD, LOOP, UNSEEN_SAVE_PATH, Loop, failed, positive, report_saved

VERL = "verl"
VERL_EXPIRATION = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
# How far ahead of now the hook puts verl's expiration time: inside verl's window (a step
# plus a save) and still ahead of now when verl compares, a moment later.
VERL_EXPIRATION_AHEAD_SECONDS = 1.0
VERL_STEP_TIME = "timing_s/step"  # in the metrics of every training step verl logs
VERL_SAVE_TIME = "timing_s/save_checkpoint"  # and of each step that saved (part of the step's)
UNSEEN_SAVE_PATH[VERL] = lambda: (
    f"{version_of(VERL)}: the step ran through neither the V1 PPOTrainer.step nor the legacy "
    "trainer's should_save_ckpt_esi, where rljob saves on notice"
)


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


VERL_REPORTED_LATER = "the save on notice is reported only at the step's log, after its validation"
HOOKS: tuple[Hook, ...] = (
    Hook(VERL, "verl.utils.checkpoint.checkpoint_manager", "should_save_ckpt_esi",
         wrap_should_save_ckpt_esi),
    Hook(VERL, "verl.trainer.ppo.v1.trainer_base", "PPOTrainer.step", wrap_v1_step),
    Hook(VERL, "verl.trainer.ppo.v1.trainer_base", "PPOTrainer._save_checkpoint",
         wrap_save_checkpoint, later=VERL_REPORTED_LATER),
    Hook(VERL, "verl.trainer.ppo.ray_trainer", "RayPPOTrainer._save_checkpoint",
         wrap_save_checkpoint, later=VERL_REPORTED_LATER),
    Hook(VERL, "verl.utils.tracking", "Tracking.log", wrap_tracking_log, ("data", "step")),
)  # fmt: skip
