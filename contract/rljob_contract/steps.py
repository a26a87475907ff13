"""The step folders: `global_step_N`, the name rljob's trainer, RLinf and verl give them (others
name them with a prefix of their own, as Hugging Face's Trainer its `checkpoint-N`)."""

from __future__ import annotations

import re

STEP_DIR_PREFIX = "global_step_"
# A step must fit the int64 of a Kubernetes integer (status.resumeFrom.step); a folder named
# with a larger one is no checkpoint of any trainer, and is passed over like any other name.
MAX_STEP = 2**63 - 1
_STEP_DIRS: dict[str, re.Pattern[str]] = {}


def step_dir_name(step: int) -> str:
    return f"{STEP_DIR_PREFIX}{step}"


def parse_step(name: str, prefix: str = STEP_DIR_PREFIX) -> int | None:
    """The N of `<prefix>N` (ASCII digits, leading zeros allowed, N <= MAX_STEP), else None."""
    pattern = _STEP_DIRS.get(prefix)
    if pattern is None:
        pattern = _STEP_DIRS[prefix] = re.compile(re.escape(prefix) + r"([0-9]+)")
    match = pattern.fullmatch(name)
    if not match or len(match.group(1).lstrip("0")) > len(str(MAX_STEP)):
        return None
    step = int(match.group(1))
    return step if step <= MAX_STEP else None
