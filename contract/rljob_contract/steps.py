"""The step folders: `global_step_N`, the name every framework rljob supports gives them."""

from __future__ import annotations

import re

STEP_DIR_PREFIX = "global_step_"
# A step must fit the int64 of a Kubernetes integer (status.resumeFrom.step); a folder named
# with a larger one is no checkpoint of any trainer, and is passed over like any other name.
MAX_STEP = 2**63 - 1
_STEP_DIR = re.compile(re.escape(STEP_DIR_PREFIX) + r"([0-9]+)")


def step_dir_name(step: int) -> str:
    return f"{STEP_DIR_PREFIX}{step}"


def parse_step(name: str) -> int | None:
    """The N of `global_step_N` (ASCII digits, leading zeros allowed, N <= MAX_STEP), else None."""
    match = _STEP_DIR.fullmatch(name)
    if not match or len(match.group(1).lstrip("0")) > len(str(MAX_STEP)):
        return None
    step = int(match.group(1))
    return step if step <= MAX_STEP else None
