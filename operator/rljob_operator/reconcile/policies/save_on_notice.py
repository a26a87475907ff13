"""Whether a preemption of a job whose framework saves on notice through rljob's bridge (RLinf,
verl, TRL) can be saved on notice, and whether a Ray job saves at all: the SaveOnNotice
condition, and a Warning Event each time it turns False.

Three sources say it cannot:
- the job's command, at every pass: verl saves no checkpoint unless `trainer.save_freq > 0`
  (its default is -1), RLinf none with `runner.save_interval <= 0`, OpenRLHF none unless
  `--ckpt.save_steps > 0` (its default is -1). A preemption then loses
  everything the attempt did, and the bridge has no save to ask for. OpenRLHF with
  `--ckpt.max_num 1` deletes its one checkpoint before it writes the next: a preemption
  during that save leaves nothing; TRL with `--save_only_model` saves weights alone, which
  rljob cannot resume from (a preemption starts again from step 0);
- the job's command, where the bridge starts the trainer's program under torchrun (TRL): a
  command other than `python SCRIPT` or `python -m MODULE` runs as it is, without the bridge,
  and so does a launcher that starts the trainer in children of its own (`python -m
  accelerate.commands.launch`, `python -m trl.cli.main`): the bridge would never see it;
- rljob's bridge, in the progress record the last attempt wrote (read at each look at the
  checkpoints): a hook that found the framework other than it expects (another version),
  or a setting it read at run time. The framework then ran as it is, and preemptions go
  back to its last periodic save.

The bridge also says where a hook that only makes the save on notice come sooner is missing:
the condition stays True, with the reason SaveOnNoticeLate and what comes later.
"""

from __future__ import annotations

from ...api.reasons import ConditionType, EventType, Reason
from ...api.spec import JobSpec
from ...api.status import find_condition
from ...frameworks import framework
from ...launcher.launchers import launcher_of
from ..plan import LookupResult, Pass

# What the command alone says: mended once the command changes.
COMMAND_REASONS = (
    Reason.PERIODIC_SAVES_OFF, Reason.CHECKPOINTS_NOT_RESUMABLE, Reason.KEEPS_ONE_CHECKPOINT,
)  # fmt: skip

# Hydra's flags for a configuration of the user's own, which may set the interval.
CONFIG_FLAGS = ("--config-name", "--config-path", "--config-dir", "-cn", "-cp", "-cd")


def override(command: tuple[str, ...], key: str) -> str | None:
    """The value `key=VALUE` (or `+key=`, `++key=`) sets in a Hydra command line, or an
    option `--key=VALUE` or `--key VALUE` in an argparse one, if any (the last one wins)."""
    value = None
    for at, arg in enumerate(command):
        name, sep, given = arg.lstrip("+").partition("=")
        if sep and name == key:
            value = given
        elif key.startswith("--") and arg == key and at + 1 < len(command):
            value = command[at + 1]
    return value


def periodic_saves_off(spec: JobSpec) -> str | None:
    """Why the job's command saves no checkpoint, where it says so (or leaves verl's default).
    The container runs the command followed by the args: an override may be in either."""
    setting = framework(spec.framework).save_interval
    if setting is None:
        return None
    key, default = setting
    command = (*spec.entry_command, *spec.args)
    value = override(command, key)
    if value is None:
        own_config = any(arg.split("=")[0] in CONFIG_FLAGS for arg in command)
        if default is None or own_config:
            return None  # set where rljob cannot see it: the bridge reads it at run time
        return f"the command does not set {key}, and {spec.framework}'s default ({default})"
    try:
        every = int(value)
    except ValueError:
        return None
    return f"{key}={value}" if every <= 0 else None


# The spellings of a boolean flag's value that transformers' argument parser reads.
_TRUE, _FALSE = ("yes", "true", "t", "y", "1"), ("no", "false", "f", "n", "0")


def saves_weights_only(spec: JobSpec) -> str | None:
    """The flag that has the trainer save the weights alone, where the command turns it on
    (`--flag`, `--flag true`, `--flag=1`; the last one given wins)."""
    flag = framework(spec.framework).weights_only_flag
    command = (*spec.entry_command, *spec.args)
    value = None
    for at, arg in enumerate(command):
        name, sep, given = arg.partition("=")
        if flag is None or name != flag:
            continue
        following = command[at + 1].lower() if at + 1 < len(command) else ""
        value = given if sep else following if following in (*_TRUE, *_FALSE) else "true"
    return f"{flag}={value}" if value is not None and value.lower() in _TRUE else None


def keeps_one_checkpoint(spec: JobSpec) -> str | None:
    """The option that has the framework keep a single checkpoint, where the command sets it:
    its rotation deletes that one before the next save, so a preemption during the save
    leaves nothing to resume from."""
    setting = framework(spec.framework).kept_checkpoints
    if setting is None:
        return None
    value = override((*spec.entry_command, *spec.args), setting[0])
    try:
        kept = int(value) if value is not None else setting[1]
    except ValueError:
        return None
    return f"{setting[0]}={value}" if kept <= 1 else None


def report_save_on_notice(p: Pass, spec: JobSpec, lookup: LookupResult | None) -> None:
    """Set SaveOnNotice from the command and from what the last attempt's bridge said."""
    current = find_condition(p.status.conditions, ConditionType.SAVE_ON_NOTICE)
    off = periodic_saves_off(spec)
    one_kept = keeps_one_checkpoint(spec)
    weights_only = saves_weights_only(spec)
    said = launcher_of(spec).bridge_unreachable(spec) or (
        lookup.save_on_notice_unavailable if lookup and spec.save_on_notice else None
    )
    late = lookup.save_on_notice_late if lookup and spec.save_on_notice else None
    if off:
        key = framework(spec.framework).save_interval[0]  # type: ignore[index]
        reason = Reason.PERIODIC_SAVES_OFF
        message = (f"{off} saves no checkpoint: a preemption loses all the progress of the "
                   f"attempt, and rljob has no save to ask for; set {key} to a number of "
                   "steps")  # fmt: skip
    elif weights_only:
        reason = Reason.CHECKPOINTS_NOT_RESUMABLE
        message = (f"{weights_only}: the trainer saves the weights alone, without the optimizer, "
                   "schedule and RNG state a resume goes on from, so rljob reads its checkpoints "
                   "as incomplete and a preemption starts the job again from its first step; "
                   f"drop {weights_only.split('=')[0]} to resume where it stopped")  # fmt: skip
    elif one_kept:
        reason = Reason.KEEPS_ONE_CHECKPOINT
        message = (f"{one_kept}: {spec.framework} deletes its only complete checkpoint before "
                   "it writes the next, and a preemption during that save leaves none to resume "
                   f"from; keep 2 or more")  # fmt: skip
    elif said:
        reason = Reason.SAVE_ON_NOTICE_UNAVAILABLE
        message = (f"{said}. The framework runs as it is; a preemption goes back to its last "
                   "periodic save")  # fmt: skip
    elif late:
        message = f"{late}. rljob saves on notice all the same, later than it could"
        if (current or {}).get("message") != message:
            p.event(EventType.WARNING, Reason.SAVE_ON_NOTICE_LATE, message)
        p.condition(ConditionType.SAVE_ON_NOTICE, True, Reason.SAVE_ON_NOTICE_LATE, message)
        return
    elif (
        current is not None
        and (current.get("status") == "False"
             or current.get("reason") == Reason.SAVE_ON_NOTICE_LATE)
        and (
            current.get("reason") in COMMAND_REASONS
            or (lookup is not None and lookup.last_finished_step is not None)
        )
    ):  # fmt: skip
        p.condition(ConditionType.SAVE_ON_NOTICE, True, Reason.SAVE_ON_NOTICE_AVAILABLE,
                    "the command saves checkpoints, and nothing said since that rljob "
                    "cannot save on notice")  # fmt: skip
        return
    else:
        return
    before = (current or {}).get("status"), (current or {}).get("message")
    p.condition(ConditionType.SAVE_ON_NOTICE, False, reason, message)
    if before != ("False", message):
        p.event(EventType.WARNING, reason, message)
