"""GRPO as tensor functions: sampling, completion masks, group advantages, the clipped loss.

Everything random goes through an explicit `torch.Generator`, whose state the checkpoint keeps,
so a resumed run samples exactly the completions an uninterrupted run would have.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from rljob_trainer.task import EOS, PAD


@torch.no_grad()
def sample_completions(
    model: Callable[[torch.Tensor], torch.Tensor],
    prompts: torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    before_token: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Sample [batch, max_new_tokens] tokens; after a sequence's EOS the rest is PAD.

    `model` maps token ids [batch, len] to logits [batch, len', vocab] whose last position
    predicts the next token. Always runs max_new_tokens forward passes, so every rank issues
    the same collectives. `before_token(n)` runs before each forward pass, with the number of
    tokens sampled so far (it may raise to abandon the rollout).
    """
    sequences = prompts
    done = torch.zeros(prompts.shape[0], dtype=torch.bool, device=prompts.device)
    for index in range(max_new_tokens):
        if before_token is not None:
            before_token(index)
        logits = model(sequences)[:, -1].float() / temperature
        next_token = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
        next_token = torch.where(done, torch.full_like(next_token, PAD), next_token)
        done |= next_token == EOS
        sequences = torch.cat([sequences, next_token[:, None]], dim=1)
    return sequences[:, prompts.shape[1] :]


def completion_mask(completions: torch.Tensor) -> torch.Tensor:
    """1.0 for tokens up to and including the first EOS, 0.0 after it."""
    is_eos = (completions == EOS).int()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0
    return (~after_eos).float()


def completion_logprobs(
    model: Callable[[torch.Tensor], torch.Tensor],
    sequences: torch.Tensor,
    prompt_len: int,
    temperature: float,
) -> torch.Tensor:
    """Log-probabilities [batch, completion_len] of the completion tokens of `sequences`."""
    return logprobs_from_logits(model(sequences[:, :-1]), sequences, prompt_len, temperature)


def logprobs_from_logits(
    logits: torch.Tensor, sequences: torch.Tensor, prompt_len: int, temperature: float
) -> torch.Tensor:
    """The same, from the logits [batch, len - 1, vocab] of `sequences` without its last token."""
    scaled = logits[:, prompt_len - 1 :].float() / temperature
    targets = sequences[:, prompt_len:]
    return torch.gather(F.log_softmax(scaled, dim=-1), 2, targets[..., None]).squeeze(2)


def group_advantages(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """Rewards [prompts, group] -> advantages normalised within each group (population std)."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, correction=0)
    return (rewards - mean) / (std + eps)


def masked_sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's unmasked tokens, then over sequences."""
    return ((values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio: float,
    kl_coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped policy-gradient loss plus kl_coef * KL(policy || reference).

    logp/old_logp/ref_logp/mask are [batch, completion_len], advantages [batch]. The KL is the
    non-negative k3 estimator exp(ref - logp) - (ref - logp) - 1, per token.
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * adv
    policy_loss = -torch.minimum(unclipped, clipped)
    log_ref_ratio = ref_logp - logp
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1.0
    loss = masked_sequence_mean(policy_loss + kl_coef * kl, mask)
    with torch.no_grad():
        stats = {
            "kl": masked_sequence_mean(kl, mask),
            "clip_frac": masked_sequence_mean((clipped < unclipped).float(), mask),
        }
    return loss, stats
