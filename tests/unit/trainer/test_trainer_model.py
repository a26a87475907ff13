"""The policy model and the per-rank random state: deterministic from the seed, round-trippable."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from rljob_trainer.config import ModelConfig
from rljob_trainer.model import build_model, model_config_dict, model_from_config_dict
from rljob_trainer.state import RNGState, TrainState, derive_seed

CFG = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_ff=32, max_seq_len=8)


def test_initialisation_depends_on_the_seed_only() -> None:
    torch.manual_seed(0)
    a = build_model(CFG, 15, seed=5, device=torch.device("cpu"))
    torch.manual_seed(1)
    b = build_model(CFG, 15, seed=5, device=torch.device("cpu"))
    c = build_model(CFG, 15, seed=6, device=torch.device("cpu"))
    for (name, pa), pb, pc in zip(
        a.state_dict().items(), b.state_dict().values(), c.state_dict().values(), strict=True
    ):
        assert torch.equal(pa, pb), name
        if "norm" not in name:
            assert not torch.equal(pa, pc), name


@pytest.mark.parametrize("tie", [True, False])
def test_forward_shape_and_config_round_trip(tie: bool) -> None:
    cfg = ModelConfig(**{**CFG.__dict__, "tie_embeddings": tie, "norm": "layernorm"})
    model = build_model(cfg, 15, seed=1, device=torch.device("cpu"))
    assert model(torch.tensor([[1, 3, 4, 5]])).shape == (1, 4, 15)
    assert ("lm_head.weight" in model.state_dict()) is not tie
    clone = model_from_config_dict(model_config_dict(cfg, 15, {"alphabet": "x"}))
    clone.load_state_dict(model.state_dict(), strict=True)
    with pytest.raises(ValueError, match="describes 'gpt2'"):
        model_from_config_dict({"architecture": "gpt2"})


def test_causal_attention_ignores_later_tokens() -> None:
    model = build_model(CFG, 15, seed=1, device=torch.device("cpu"))
    a = model(torch.tensor([[1, 3, 4, 5]]))
    b = model(torch.tensor([[1, 3, 4, 9]]))
    assert torch.equal(a[:, :3], b[:, :3])
    assert not torch.equal(a[:, 3], b[:, 3])


def test_rng_state_round_trip_restores_every_generator() -> None:
    generator = torch.Generator()
    rng = RNGState(rank=1, seed=9, sampling_generator=generator)
    rng.reseed(step=0)
    state = rng.state_dict()
    assert list(state) == ["rank_1"]

    def draw() -> tuple[float, float, float, float]:
        return (
            random.random(),
            float(np.random.rand()),
            float(torch.rand(1)),
            float(torch.rand(1, generator=generator)),
        )

    expected = draw()
    rng.reseed(step=3)
    assert draw() != expected
    rng.load_state_dict(state)
    assert draw() == expected


def test_derived_seeds_differ_per_rank_and_step() -> None:
    seeds = {derive_seed(1, rank, step) for rank in range(4) for step in range(4)}
    assert len(seeds) == 16 and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(1, 0, 0) == derive_seed(1, 0, 0)


def test_train_state_refuses_a_different_model() -> None:
    saved = TrainState({"d_model": 16, "n_layers": 2})
    saved.step = 30
    other = TrainState({"d_model": 32, "n_layers": 2})
    with pytest.raises(ValueError, match=r"differs from this run's in: \['d_model'\]"):
        other.load_state_dict(saved.state_dict())
    same = TrainState({"d_model": 16, "n_layers": 2})
    same.load_state_dict(saved.state_dict())
    assert same.step == 30
