"""A plain torch.distributed.checkpoint folder: `global_step_N/` is itself the DCP folder."""

from __future__ import annotations

from pathlib import Path

from ..dcp import check_dcp
from .base import Layout


def check(folder: Path, step: int, deep: bool) -> str:
    check_dcp(folder, "", deep)
    return ".metadata written after every shard" + (", byte ranges present" if deep else "")


LAYOUT = Layout("dcp", check)
