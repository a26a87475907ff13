"""When a Megatron checkpoint of one TP x PP x DP split may resume in another."""

from __future__ import annotations

import pytest
from rljob_trainer.megatron.shape import ParallelShape, resume_refusal

TP2 = ParallelShape(2, 1, 1)


def refusal(now: ParallelShape, *, distributed: bool, allow: bool) -> str | None:
    return resume_refusal(
        TP2, now, distributed_optimizer=distributed, allow_world_size_change=allow
    )


@pytest.mark.parametrize("distributed", [True, False])
@pytest.mark.parametrize("allow", [True, False])
def test_the_same_split_always_resumes(distributed: bool, allow: bool) -> None:
    assert refusal(ParallelShape(2, 1, 1), distributed=distributed, allow=allow) is None


def test_the_distributed_optimizer_changes_only_its_data_parallel_size() -> None:
    assert refusal(ParallelShape(2, 1, 2), distributed=True, allow=True) is None
    for other in (ParallelShape(1, 1, 2), ParallelShape(2, 2, 1)):
        reason = refusal(other, distributed=True, allow=True)
        assert reason is not None
        assert f"written as TP2 x PP1 x DP1 and this run is {other}" in reason
        assert "megatron.tensor_model_parallel_size=2" in reason


def test_a_plain_optimizer_reshards_any_split_with_the_flag() -> None:
    for other in (ParallelShape(1, 1, 2), ParallelShape(1, 2, 1), ParallelShape(2, 1, 2)):
        assert refusal(other, distributed=False, allow=True) is None
        reason = refusal(other, distributed=False, allow=False)
        assert reason is not None and "runner.allow_world_size_change=true" in reason


def test_the_shape_round_trips_through_the_checkpoint() -> None:
    assert ParallelShape.from_dict(TP2.to_dict()) == TP2
