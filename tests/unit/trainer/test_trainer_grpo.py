"""GRPO's tensor functions: advantages, masks, log-probabilities, the clipped loss, sampling."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rljob_trainer import grpo
from rljob_trainer.task import EOS, PAD
from torch import nn


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.lists(st.floats(-10, 10, width=32), min_size=4, max_size=4), min_size=1, max_size=5)
)
def test_group_advantages_are_normalised_within_each_group(rows: list[list[float]]) -> None:
    rewards = torch.tensor(rows, dtype=torch.float64)
    adv = grpo.group_advantages(rewards, eps=1e-6)
    assert torch.allclose(adv.mean(dim=1), torch.zeros(len(rows), dtype=torch.float64), atol=1e-6)
    for row, adv_row in zip(rewards, adv, strict=True):
        if row.std(correction=0) > 1e-2:
            assert torch.allclose(
                adv_row.std(correction=0), torch.tensor(1.0, dtype=torch.float64), atol=1e-3
            )
        # A better reward never gets less advantage.
        for i in range(4):
            for j in range(4):
                if row[i] < row[j]:
                    assert adv_row[i] <= adv_row[j]


def test_equal_rewards_give_zero_advantage() -> None:
    adv = grpo.group_advantages(torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.5]]), eps=1e-6)
    assert torch.equal(adv[0], torch.zeros(3))
    assert adv[1, 1] > adv[1, 2] > adv[1, 0]


def test_completion_mask_keeps_tokens_up_to_the_first_eos() -> None:
    completions = torch.tensor(
        [[5, EOS, PAD, PAD], [EOS, PAD, PAD, PAD], [5, 6, 7, 8], [5, 6, EOS, EOS]]
    )
    expected = torch.tensor(
        [[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]]
    )
    assert torch.equal(grpo.completion_mask(completions), expected)


class _Bigram(nn.Module):
    """Logits depend only on the current token: a model whose log-probs we can write down."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = nn.Parameter(
            torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0))
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table[tokens]


def test_completion_logprobs_score_the_completion_tokens() -> None:
    model = _Bigram(6)
    sequences = torch.tensor([[1, 3, 4, 5, 2]])
    got = grpo.completion_logprobs(model, sequences, prompt_len=3, temperature=2.0)
    table = torch.log_softmax(model.table / 2.0, dim=-1)
    expected = torch.stack([table[4, 5], table[5, 2]])[None]
    assert torch.allclose(got, expected)


def test_loss_on_policy_is_advantage_weighted_logprob_gradient() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([2.0, -1.0])
    loss, stats = grpo.grpo_loss(logp, logp.detach(), logp.detach(), adv, mask, 0.2, kl_coef=0.5)
    assert torch.isclose(
        loss, torch.tensor(-(2.0 + -1.0) / 2)
    )  # ratio 1: -mean over sequences of A
    assert stats["kl"] == 0 and stats["clip_frac"] == 0
    loss.backward()
    # d/dlogp of -A * ratio / len, averaged over 2 sequences; the masked token gets nothing.
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -0.5], [0.5, 0.0]]))


def test_ratio_beyond_the_clip_gets_no_gradient() -> None:
    old = torch.zeros(2, 1)
    logp = torch.log(torch.tensor([[1.5], [1.1]])).requires_grad_()  # ratios 1.5 and 1.1
    mask = torch.ones(2, 1)
    loss, stats = grpo.grpo_loss(logp, old, logp.detach(), torch.ones(2), mask, 0.2, kl_coef=0.0)
    loss.backward()
    assert logp.grad[0, 0] == 0  # clipped at 1.2: no push further
    assert logp.grad[1, 0] < 0  # inside the range: pushed up
    assert stats["clip_frac"] == 0.5


def test_kl_term_is_nonnegative_and_zero_only_at_the_reference() -> None:
    logp = torch.tensor([[-1.0, -2.0, -3.0]])
    ref = torch.tensor([[-1.0, -1.0, -5.0]])
    mask = torch.ones(1, 3)
    zero_adv = torch.zeros(1)
    loss, stats = grpo.grpo_loss(logp, logp, ref, zero_adv, mask, 0.2, kl_coef=1.0)
    assert stats["kl"] > 0
    assert torch.isclose(loss, stats["kl"])
    _, same = grpo.grpo_loss(logp, logp, logp, zero_adv, mask, 0.2, kl_coef=1.0)
    assert same["kl"] == 0


def test_sampling_is_reproducible_and_pads_after_eos() -> None:
    model = _Bigram(8)
    prompts = torch.tensor([[1, 3], [1, 4], [1, 5]]).repeat_interleave(20, dim=0)

    def sample(seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return grpo.sample_completions(model, prompts, 5, 1.0, generator)

    first = sample(7)
    assert first.shape == (60, 5)
    assert torch.equal(first, sample(7))
    assert not torch.equal(first, sample(8))
    for row in first.tolist():
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1 :])
