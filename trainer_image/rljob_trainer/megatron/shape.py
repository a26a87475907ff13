"""How a Megatron run splits its ranks, and whether a checkpoint of one split resumes in another.

Pure: no megatron import, so that the rule is unit-tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParallelShape:
    """Tensor x pipeline x data parallel sizes; a checkpoint records the shape that wrote it."""

    tensor: int
    pipeline: int
    data: int

    def __str__(self) -> str:
        return f"TP{self.tensor} x PP{self.pipeline} x DP{self.data}"

    def to_dict(self) -> dict[str, int]:
        return {"tensor": self.tensor, "pipeline": self.pipeline, "data": self.data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParallelShape:
        return cls(int(data["tensor"]), int(data["pipeline"]), int(data["data"]))


def resume_refusal(
    saved: ParallelShape,
    now: ParallelShape,
    *,
    distributed_optimizer: bool,
    allow_world_size_change: bool,
) -> str | None:
    """Why a checkpoint written as `saved` cannot be resumed as `now`, or None if it can.

    dist_checkpointing re-shards the model and a plain optimizer's state to any split; the
    distributed optimizer's `dp_reshardable` state only to another data-parallel size. Per-rank
    random state never maps to another split, so any change needs the flag.
    """
    if saved == now:
        return None
    if distributed_optimizer and (saved.tensor, saved.pipeline) != (now.tensor, now.pipeline):
        return (
            f"it was written as {saved} and this run is {now}: the distributed optimizer's "
            "state (dp_reshardable) can change only its data-parallel size. Resume with "
            f"megatron.tensor_model_parallel_size={saved.tensor} and "
            f"megatron.pipeline_model_parallel_size={saved.pipeline}"
        )
    if not allow_world_size_change:
        return (
            f"it was written as {saved} and this run is {now}: the model and optimizer would be "
            "re-sharded, but the per-rank random state cannot carry over, so the run would not "
            "be bit-exact. Set runner.allow_world_size_change=true to resume anyway with "
            f"reseeded random state, or run as {saved}"
        )
    return None
