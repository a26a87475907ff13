"""The registry of checkpoint layouts, by the name `--layout` takes."""

from __future__ import annotations

from ..errors import CheckpointInputError
from . import (
    dcp,
    hf_trainer,
    openrlhf_deepspeed,
    rlinf_fsdp,
    rlinf_megatron,
    rljob,
    verl_fsdp,
    verl_megatron,
)
from .base import Layout

MODULES = (
    rljob, rlinf_fsdp, rlinf_megatron, verl_fsdp, verl_megatron, dcp, hf_trainer,
    openrlhf_deepspeed,
)  # fmt: skip
LAYOUTS: dict[str, Layout] = {module.LAYOUT.name: module.LAYOUT for module in MODULES}
AUTO = "auto"
CHOICES = (AUTO, *LAYOUTS)


def get_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise CheckpointInputError(
            f"unknown layout {name!r}: choose one of {', '.join(CHOICES)}"
        ) from None


__all__ = ["AUTO", "CHOICES", "LAYOUTS", "Layout", "get_layout"]
