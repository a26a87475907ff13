"""RLinf with the Megatron backend: Megatron-LM's own save into each role folder.

`actor/iter_{N:07d}/` holds the legacy per-rank folders (RLinf's configs use
`ckpt_format: torch`) or a dist_checkpointing folder, and `actor/latest_checkpointed_
iteration.txt`, which Megatron's rank 0 writes with N once every rank has saved. The
iteration is checked before the tracker, in the order they are written, so that a torn
save is named by the first piece it lacks (rljob's own layout reports its Megatron saves
torn before their manifest with this check).
"""

from __future__ import annotations

from pathlib import Path

from ..megatron import check_dist_ckpt, check_mp_rank_grid, is_dist_ckpt
from ..probe import join, names, read_text
from ..verdict import Incomplete
from . import _rlinf
from .base import Layout

TRACKER = "latest_checkpointed_iteration.txt"


def check_role(folder: Path, role: str, step: int, deep: bool) -> str:
    iteration = join(role, f"iter_{step:07d}")
    if is_dist_ckpt(names(folder, iteration)):
        check_dist_ckpt(folder, iteration, deep)
    else:
        check_mp_rank_grid(folder, iteration, deep)
    _check_tracker(folder, role, step)
    return f"{iteration}/ whole"


def _check_tracker(folder: Path, role: str, step: int) -> None:
    tracker = join(role, TRACKER)
    text = read_text(folder, tracker)
    if text is None:
        raise Incomplete(f"{tracker} is missing: Megatron writes it after every rank has saved")
    if text.strip() != str(step):
        raise Incomplete(f"{tracker} says {text.strip()[:40]!r}, not {step}")


def check(folder: Path, step: int, deep: bool) -> str:
    return _rlinf.check_run(folder, step, deep, check_role)


LAYOUT = Layout("rlinf-megatron", check, _rlinf.OPTIONAL_PARTS)
