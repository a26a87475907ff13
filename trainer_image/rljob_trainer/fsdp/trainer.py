"""The FSDP2 backend: rljob's own TransformerLM sharded with `fully_shard`, saved with DCP.

One step: every rank takes its slice of the step's prompts, samples `group_size` completions per
prompt, scores them, and runs `update_epochs` optimizer updates on the clipped GRPO loss; FSDP2
averages the gradients over ranks.

A rank keeps its state across a warm restart (`rljob_trainer.warm`): its trainer in the new
attempt's group is built on the meta device, sharded on the new group and given this rank's
shards of the old one (the same rank in a gang of the same size holds the same shard), so that
nothing is initialised or read.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from rljob_trainer import grpo
from rljob_trainer.checkpoint import CheckpointManager
from rljob_trainer.config import TrainerConfig
from rljob_trainer.faults import NO_FAULTS, Faults
from rljob_trainer.fsdp.checkpoint import DcpFormat
from rljob_trainer.model import TransformerLM, build_model, model_config_dict
from rljob_trainer.state import (
    ModelState,
    OptimizerState,
    SchedulerState,
)
from rljob_trainer.train import DistEnv, Trainer, agree_on_metrics


def shard(model: TransformerLM) -> TransformerLM:
    """FSDP2: one unit per block, the embeddings, final norm and head in the root unit."""
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def rehome(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`value`'s local shard as a DTensor on `like`'s mesh and placements (a plain tensor, such
    as AdamW's step count, as it is)."""
    if not isinstance(value, DTensor):
        return value
    assert isinstance(like, DTensor)
    return DTensor.from_local(
        value.to_local(), like.device_mesh, like.placements, run_check=False,
        shape=value.shape, stride=value.stride(),
    )  # fmt: skip


@torch.no_grad()
def copy_shards(source: torch.nn.Module, target: torch.nn.Module) -> None:
    """Every parameter's local shard of `source` into `target`'s (the same model, sharded
    alike on another group). `source` is resharded first: a root that ran forward without a
    backward (the reference) keeps its parameters gathered."""
    for module in source.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
    for (name, old), (new_name, new) in zip(
        source.named_parameters(), target.named_parameters(), strict=True
    ):
        assert name == new_name, (name, new_name)
        new.to_local().copy_(old.to_local())


def copy_optimizer(
    source: torch.optim.Optimizer, target: torch.optim.Optimizer, params: list[torch.Tensor]
) -> None:
    """`source`'s state and hyperparameters into `target`, whose parameters `params` stand
    where `source`'s stood, in the same order."""
    old_params = [p for group in source.param_groups for p in group["params"]]
    for old, new in zip(old_params, params, strict=True):
        if old in source.state:
            target.state[new] = {k: rehome(v, new) for k, v in source.state[old].items()}
    for old_group, new_group in zip(source.param_groups, target.param_groups, strict=True):
        new_group.update({k: v for k, v in old_group.items() if k != "params"})


class FsdpTrainer(Trainer):
    can_hold = True

    def __init__(
        self,
        cfg: TrainerConfig,
        env: DistEnv,
        faults: Faults = NO_FAULTS,
        held: FsdpTrainer | None = None,
    ) -> None:
        # Before anything here draws from the global generators (a module's own init does).
        held_random = held.random_states() if held is not None else None
        super().__init__(cfg, env, faults)
        runner, algo = cfg.runner, cfg.algorithm
        vocab = self.tokenizer.vocab_size

        def model() -> TransformerLM:
            if held is None:
                return shard(build_model(cfg.model, vocab, runner.seed, env.device))
            with torch.device("meta"):
                empty = shard(TransformerLM(cfg.model, vocab))
            return empty.to_empty(device=env.device)

        self.policy = model()
        # The reference is the initial policy, rebuilt from the same seed, so it is not saved.
        self.reference = None
        if algo.kl_coef > 0:
            self.reference = model()
            self.reference.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(), lr=algo.lr, weight_decay=algo.weight_decay
        )
        warmup = algo.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / (warmup + 1))
        )
        model_config = model_config_dict(cfg.model, vocab, self.tokenizer.describe())
        self.set_up_state(env.rank, env.world_size, model_config)
        if held is not None:
            copy_shards(held.policy, self.policy)
            if self.reference is not None:
                assert held.reference is not None
                copy_shards(held.reference, self.reference)
            copy_optimizer(held.optimizer, self.optimizer, list(self.policy.parameters()))
            self.scheduler.load_state_dict(held.scheduler.state_dict())
            assert held_random is not None
            self.keep_from(held, held_random)
        states = {
            "model": ModelState(self.policy),
            "optimizer": OptimizerState(self.policy, self.optimizer),
            "lr_scheduler": SchedulerState(self.scheduler),
            "train_state": self.train_state,
            "rng": self.rng,
        }
        fmt = DcpFormat(
            states,
            self.sampler,
            self.policy,
            model_config,
            async_save=runner.async_save,
            save_full_model=runner.save_full_model,
        )
        self.checkpoints = CheckpointManager(
            self.checkpoint_dir,
            fmt,
            async_save=runner.async_save,
            keep=runner.max_num_checkpoints,
            faults=faults,
        )

    def rejoined(self, cfg: TrainerConfig, env: DistEnv) -> FsdpTrainer:
        if (env.rank, env.world_size) != (self.env.rank, self.env.world_size):
            raise ValueError(f"rank {self.env.rank} of {self.env.world_size} holds its own shard, "
                             f"not that of rank {env.rank} of {env.world_size}")  # fmt: skip
        return FsdpTrainer(cfg, env, self.faults, held=self)

    def train_step(self) -> dict[str, float]:
        algo = self.cfg.algorithm
        self.policy.eval()
        batch = self.rollout(self.policy)
        sequences, prompt_len = batch.sequences, batch.prompt_len
        with torch.no_grad():
            old_logp = grpo.completion_logprobs(
                self.policy, sequences, prompt_len, algo.temperature
            )
            ref_logp = (
                grpo.completion_logprobs(self.reference, sequences, prompt_len, algo.temperature)
                if self.reference is not None
                else old_logp
            )

        self.policy.train()
        lr = self.scheduler.get_last_lr()[0]
        # Loss, KL and gradient norm of the first update (on the sampling policy); the clip
        # fraction of the last (in the first the ratio is exactly 1).
        first: dict[str, float] = {}
        for epoch in range(algo.update_epochs):
            logp = grpo.completion_logprobs(self.policy, sequences, prompt_len, algo.temperature)
            loss, stats = grpo.grpo_loss(
                logp, old_logp, ref_logp, batch.advantages, batch.mask, algo.clip_ratio,
                algo.kl_coef,
            )  # fmt: skip
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), algo.max_grad_norm)
            if isinstance(grad_norm, DTensor):
                grad_norm = grad_norm.full_tensor()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if epoch == 0:
                first = {
                    "loss": loss.item(),
                    "kl": stats["kl"].item(),
                    "grad_norm": grad_norm.item(),
                }
        self.scheduler.step()
        rewards = batch.rewards
        local = (
            first["loss"],
            rewards.mean().item(),
            (rewards == 1.0).float().mean().item(),
            first["kl"],
            stats["clip_frac"].item(),
        )
        return agree_on_metrics(local, self.env.world_size, first["grad_norm"], lr)
