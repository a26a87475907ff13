"""The prompt sampler: deterministic, resumable, the same stream for any number of ranks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rljob_trainer.data import PromptSampler


def test_each_epoch_visits_every_example_once() -> None:
    sampler = PromptSampler(num_examples=10, prompts_per_step=5, seed=3, rank=0, world_size=1)
    epoch0 = sampler.next_global_batch() + sampler.next_global_batch()
    epoch1 = sampler.next_global_batch() + sampler.next_global_batch()
    assert sorted(epoch0) == sorted(epoch1) == list(range(10))
    assert epoch0 != epoch1


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 30), st.integers(1, 7), st.integers(0, 10**6))
def test_state_round_trip_continues_the_same_stream(steps: int, per_step: int, seed: int) -> None:
    sampler = PromptSampler(13, per_step, seed, rank=0, world_size=1)
    for _ in range(steps):
        sampler.next_global_batch()
    state = sampler.state_dict()
    expected = [sampler.next_global_batch() for _ in range(5)]
    restored = PromptSampler(13, per_step, seed, rank=0, world_size=1)
    restored.load_state_dict(state)
    assert [restored.next_global_batch() for _ in range(5)] == expected


def test_ranks_slice_the_single_rank_stream() -> None:
    single = PromptSampler(25, 8, seed=1, rank=0, world_size=1)
    ranks = [PromptSampler(25, 8, seed=1, rank=r, world_size=4) for r in range(4)]
    for _ in range(7):
        assert [i for s in ranks for i in s.next_local_batch()] == single.next_local_batch()
    assert all(s.state_dict() == single.state_dict() for s in ranks)


def test_refuses_indivisible_batch_and_a_different_stream() -> None:
    with pytest.raises(ValueError, match="divisible by the number of ranks"):
        PromptSampler(25, 6, seed=1, rank=0, world_size=4)
    state = PromptSampler(25, 8, seed=1, rank=0, world_size=1).state_dict()
    with pytest.raises(ValueError, match="seed=1, this run has 2"):
        PromptSampler(25, 8, seed=2, rank=0, world_size=1).load_state_dict(state)
