"""rljob's hook into OpenRLHF's load (the checkpoint rljob chose), installed by
rljob_ray_bridge.py, beside which a Ray job of OpenRLHF ships it.

OpenRLHF has no save on notice. With --ckpt.load_enable its actors and critics load the folder
DeepSpeed's `latest` names, which a save cut short can leave naming a torn folder: the hook on
`DeepspeedStrategy.load_ckpt` gives DeepSpeed the tag of the folder rljob chose
(RLJOB_RESUME_DIR's name) where the caller gave none and the folder is there; otherwise, and
where the hook is missing, OpenRLHF loads as it would (the worker's log says so).
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rljob_contract as contract
from rljob_guest import Hook  # mounted beside this file
from rljob_ray_bridge import LOOP, Loop, failed

OPENRLHF = "openrlhf"


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


HOOKS: tuple[Hook, ...] = (
    Hook(OPENRLHF, "openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.load_ckpt",
         wrap_load_ckpt, ("load_dir", "tag")),
)  # fmt: skip
