"""RLinf with the Megatron backend: Megatron-LM's own save into each role folder.

`actor/iter_{N:07d}/` holds the legacy per-rank folders (RLinf's configs use
`ckpt_format: torch`) or a dist_checkpointing folder, and `actor/latest_checkpointed_
iteration.txt`, which Megatron's rank 0 writes with N once every rank has saved.
"""

from __future__ import annotations

from pathlib import Path

from ..megatron import DIST_MARKER, check_dist_ckpt, check_mp_rank_grid
from ..probe import join, names, read_text
from ..verdict import Incomplete
from . import _rlinf
from .base import Layout

TRACKER = "latest_checkpointed_iteration.txt"


def check_role(folder: Path, role: str, step: int, deep: bool) -> str:
    tracker = join(role, TRACKER)
    text = read_text(folder, tracker)
    if text is None:
        raise Incomplete(f"{tracker} is missing: Megatron writes it after every rank has saved")
    if text.strip() != str(step):
        raise Incomplete(f"{tracker} says {text.strip()[:40]!r}, not {step}")
    iteration = join(role, f"iter_{step:07d}")
    entries = names(folder, iteration)
    if DIST_MARKER in entries or ".metadata" in entries:
        check_dist_ckpt(folder, iteration, deep)
    else:
        check_mp_rank_grid(folder, iteration, deep)
    return f"{iteration}/ whole"


def check(folder: Path, step: int, deep: bool) -> str:
    return _rlinf.check_run(folder, step, deep, check_role)


LAYOUT = Layout("rlinf-megatron", check, _rlinf.OPTIONAL_PARTS)
