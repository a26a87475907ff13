"""The Megatron backend's GRPO step: megatron-core's GPTModel under its DDP, optimizer and
pipeline schedules.

The algorithm, task and metrics are the FSDP backend's (`rljob_trainer.grpo`). What differs is
where each piece runs:

- the prompts are split over the data-parallel ranks; the tensor- and pipeline-parallel ranks
  of one model replica work on the same prompts;
- every forward pass goes through megatron's pipeline schedule; the last stage gathers the
  vocabulary-parallel logits over its tensor-parallel group;
- sampling: the last stage's next-token logits are broadcast over the pipeline group, so every
  rank of a replica draws the same tokens from its own generator (seeded by data-parallel
  rank, so the generators of one replica agree);
- the loss is computed on the last stage; gradients are reduced by megatron's DDP and
  `finalize_model_grads` (data parallel, and the tied embedding of the first and last stages).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state, tensor_parallel
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.pipeline_parallel import get_forward_backward_func
from torch import nn

from rljob_trainer import grpo
from rljob_trainer.checkpoint import CheckpointManager
from rljob_trainer.config import TrainerConfig
from rljob_trainer.faults import NO_FAULTS, Faults
from rljob_trainer.megatron.checkpoint import MegatronFormat
from rljob_trainer.megatron.model import (
    build_gpt,
    init_parallel,
    transformer_config,
)
from rljob_trainer.model import model_config_dict
from rljob_trainer.train import DistEnv, Trainer, agree_on_metrics

ARCHITECTURE = "megatron-core GPTModel"
# What megatron's schedule calls on the last stage's output: (loss, what to report).
LossFunc = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class MegatronTrainer(Trainer):
    def __init__(self, cfg: TrainerConfig, env: DistEnv, faults: Faults = NO_FAULTS) -> None:
        super().__init__(cfg, env, faults)
        runner, algo, parallel = cfg.runner, cfg.algorithm, cfg.megatron
        self.shape = init_parallel(parallel, runner.seed, on_cpu=env.device.type == "cpu")
        self.vocab_size = self.tokenizer.vocab_size
        self.config = transformer_config(cfg.model)
        self.config.finalize_model_grads_func = finalize_model_grads
        gpt = build_gpt(cfg.model, self.vocab_size, self.config, runner.seed, env.device)
        ddp_config = DistributedDataParallelConfig(
            use_distributed_optimizer=parallel.use_distributed_optimizer,
            grad_reduce_in_fp32=True,
        )
        self.policy = DistributedDataParallel(self.config, ddp_config, gpt)
        # The reference is the initial policy, rebuilt from the same seed, so it is not saved.
        self.reference: nn.Module | None = None
        if algo.kl_coef > 0:
            self.reference = build_gpt(
                cfg.model, self.vocab_size, self.config, runner.seed, env.device
            )
            self.reference.requires_grad_(False)
            self.reference.eval()
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(
                optimizer="adam",
                lr=algo.lr,
                min_lr=algo.lr,
                weight_decay=algo.weight_decay,
                clip_grad=algo.max_grad_norm,
                use_distributed_optimizer=parallel.use_distributed_optimizer,
            ),
            [self.policy],
        )
        warmup = algo.warmup_steps
        # Linear warm-up from lr / (warmup + 1) to lr, then constant: the FSDP backend's schedule.
        self.scheduler = OptimizerParamScheduler(
            self.optimizer,
            init_lr=algo.lr / (warmup + 1),
            max_lr=algo.lr,
            min_lr=algo.lr,
            lr_warmup_steps=warmup,
            lr_decay_steps=runner.max_steps + warmup + 1,
            lr_decay_style="constant",
            start_wd=algo.weight_decay,
            end_wd=algo.weight_decay,
            wd_incr_steps=runner.max_steps + 1,
            wd_incr_style="constant",
        )
        dp_rank = parallel_state.get_data_parallel_rank()
        model_config = model_config_dict(
            cfg.model, self.vocab_size, self.tokenizer.describe(), ARCHITECTURE
        )
        self.set_up_state(dp_rank, self.shape.data, model_config)
        fmt = MegatronFormat(
            self.policy,
            self.optimizer,
            self.scheduler,
            self.train_state,
            self.rng,
            self.sampler,
            self.shape,
            distributed_optimizer=parallel.use_distributed_optimizer,
            seed=runner.seed,
        )
        self.checkpoints = CheckpointManager(
            self.checkpoint_dir,
            fmt,
            async_save=False,
            keep=runner.max_num_checkpoints,
            faults=faults,
        )
        self.last_stage = parallel_state.is_pipeline_last_stage()

    def random_states(self) -> dict[str, Any]:
        """The shared generators, and megatron's model-parallel RNG tracker."""
        return {
            **super().random_states(),
            "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
        }

    def restore_random_states(self, states: dict[str, Any]) -> None:
        states = dict(states)
        tensor_parallel.get_cuda_rng_tracker().set_states(states.pop("tracker"))
        super().restore_random_states(states)

    # ------------------------------------------------------------------------ forward passes
    def _run_pipeline(
        self, model: nn.Module, tokens: torch.Tensor, loss_func: LossFunc | None = None
    ) -> list:
        """One pass of megatron's schedule over `tokens` as a single micro-batch; with a
        `loss_func`, also the backward pass. On the last stage: the logits, or what
        `loss_func` reported; elsewhere nothing."""
        batch, length = tokens.shape
        positions = torch.arange(length, device=tokens.device).expand(batch, length)
        causal = torch.ones(1, 1, length, length, dtype=torch.bool, device=tokens.device).triu(1)

        def forward_step(_data_iterator: Iterator[None], module: nn.Module):
            return module(tokens, positions, causal), loss_func

        return get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iter([None]),
            model=[model],
            num_microbatches=1,
            seq_length=length,
            micro_batch_size=batch,
            forward_only=loss_func is None,
        )

    def _full_logits(self, local_logits: torch.Tensor) -> torch.Tensor:
        """The last stage's vocabulary-parallel logits, gathered, without the padding."""
        full = tensor_parallel.gather_from_tensor_model_parallel_region(local_logits)
        return full[..., : self.vocab_size]

    def _logits(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor | None:
        outputs = self._run_pipeline(model, tokens)
        return self._full_logits(outputs[0]) if self.last_stage else None

    def _next_token_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [batch, 1, vocab] of the next token, on every rank of the pipeline."""
        logits = self._logits(self.policy, tokens)
        last = torch.empty(tokens.shape[0], 1, self.vocab_size, device=tokens.device)
        if logits is not None:
            last.copy_(logits[:, -1:].float())
        if parallel_state.get_pipeline_model_parallel_world_size() > 1:
            dist.broadcast(
                last,
                src=parallel_state.get_pipeline_model_parallel_last_rank(),
                group=parallel_state.get_pipeline_model_parallel_group(),
            )
        return last

    # ------------------------------------------------------------------------------ a step
    def train_step(self) -> dict[str, float]:
        algo = self.cfg.algorithm
        self.policy.eval()
        batch = self.rollout(self._next_token_logits)
        sequences, prompt_len = batch.sequences, batch.prompt_len
        inputs = sequences[:, :-1]
        old_logp = ref_logp = None  # on the last stage only
        with torch.no_grad():
            logits = self._logits(self.policy, inputs)
            if logits is not None:
                old_logp = grpo.logprobs_from_logits(
                    logits, sequences, prompt_len, algo.temperature
                )
            ref_logp = old_logp
            if self.reference is not None:
                logits = self._logits(self.reference, inputs)
                if logits is not None:
                    ref_logp = grpo.logprobs_from_logits(
                        logits, sequences, prompt_len, algo.temperature
                    )

        def grpo_loss(local_logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            logp = grpo.logprobs_from_logits(
                self._full_logits(local_logits), sequences, prompt_len, algo.temperature
            )
            loss, stats = grpo.grpo_loss(
                logp, old_logp, ref_logp, batch.advantages, batch.mask, algo.clip_ratio,
                algo.kl_coef,
            )  # fmt: skip
            return loss, {"loss": loss.detach(), **stats}

        self.policy.train()
        lr = float(self.optimizer.param_groups[0]["lr"])
        # Loss, KL and gradient norm of the first update (on the sampling policy); the clip
        # fraction of the last (in the first the ratio is exactly 1).
        first: dict[str, torch.Tensor] = {}
        reported: dict[str, torch.Tensor] = {}
        grad_norms = []
        for _ in range(algo.update_epochs):
            self.policy.zero_grad_buffer()
            self.optimizer.zero_grad()
            outputs = self._run_pipeline(self.policy, inputs, grpo_loss)
            grad_norms.append(float(self.optimizer.step()[1]))
            reported = outputs[0] if outputs else {}
            first = first or reported
        self.scheduler.step(increment=1)
        # Each data-parallel replica reports once: its last stage's first tensor-parallel rank.
        reports = self.last_stage and parallel_state.get_tensor_model_parallel_rank() == 0
        rewards = batch.rewards
        local = None
        if reports:
            local = (
                first["loss"].item(),
                rewards.mean().item(),
                (rewards == 1.0).float().mean().item(),
                first["kl"].item(),
                reported["clip_frac"].item(),
            )
        return agree_on_metrics(local, self.shape.data, grad_norms[0], lr)
