"""What verl's trainer writes around the model's own files, for both backends.

`_save_checkpoint` saves `actor/`, then `critic/`, then `data.pt` (dataloader state, a
plain torch.save) into `global_step_N/`, and last writes N into
`latest_checkpointed_iteration.txt` in the PARENT directory, one tracker for the run
(skipped by the trainer under async_save; verl's Megatron manager then writes it when
the asynchronous save finalizes). The tracker is only used as an upper bound: a folder
newer than it did not finish its save. It is not trusted to name a good folder: it may
point at a folder that was deleted, or be ahead of what is on disk.

Retention (`max_actor_ckpt_to_keep`) deletes `global_step_N/actor/` of old checkpoints
and leaves the folder with its `data.pt`: a folder existing proves nothing.
"""

from __future__ import annotations

from pathlib import Path

from ..probe import intact_zip, is_dir, nonempty_file, size_of
from ..verdict import Incomplete
from .base import ROLES, RoleCheck

TRACKER = "latest_checkpointed_iteration.txt"
DATA = "data.pt"
OPTIONAL_PARTS = ("critic",)


def tracked_step(directory: Path) -> int | None:
    """The step in the run's tracker, None if it is absent or not a number."""
    try:
        with (directory / TRACKER).open("rb") as fh:
            return int(fh.read(64).decode("ascii").strip())
    except (OSError, ValueError):
        return None


def check_run(folder: Path, step: int, deep: bool, check_role: RoleCheck) -> str:
    """The tracker bound, every role folder with `check_role`, then `data.pt`."""
    tracked = tracked_step(folder.parent)
    if tracked is not None and step > tracked:
        raise Incomplete(
            f"newer than ../{TRACKER} ({tracked}): verl writes the tracker last,"
            " so this save did not finish"
        )
    if not is_dir(folder, "actor"):
        if size_of(folder, DATA) is not None:
            raise Incomplete("actor/ is missing, only data.pt is left: verl's retention removed it")
        raise Incomplete("actor/ is missing")
    done = [check_role(folder, role, step, deep) for role in ROLES if is_dir(folder, role)]
    nonempty_file(folder, DATA, "verl writes it after actor/ and critic/")
    if deep:
        intact_zip(folder, DATA)
    done.append(DATA)
    done.append(f"tracker at {tracked}" if tracked is not None else "no tracker")
    return "; ".join(done)
