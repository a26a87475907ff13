"""How verl's real GRPO driver (`python -m verl.trainer.main_ppo`, the V1 trainer) runs on CPU
with this package: the environment every verl process needs and the driver's Hydra overrides,
in one place for hack/verl_cpu_probe/run.sh, the e2e tests and the verl demo.

Everything here is a setting of verl's own (no patch): what it chooses is a tiny job (batches
of 2 prompts x 2 samples, 16 new tokens) on the CPU rollout, with one agent-loop and one
reward worker, the dense toy reward, and the replay buffer that keeps a batch in sampled
order (`sampler`).
"""

from __future__ import annotations

import sys
from pathlib import Path

ENV = {
    # verl's plugin switch imports this package in every verl process (driver, TaskRunner,
    # workers, rollout servers); FSDP's engine is registered for cuda and npu only, so it is
    # chosen by name.
    "VERL_USE_EXTERNAL_MODULES": "rljob_verl_cpu",
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "VERL_ENGINE_VENDOR": "nvidia",
    "OMP_NUM_THREADS": "1",
    "HYDRA_FULL_ERROR": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "disabled",
}
# Ray's logical resources a node must offer (the load stays on the machine's cores): verl's
# resource pools want a "GPU" bundle of 3 CPUs each, TransferQueue one CPU per actor.
NODE_CPUS, NODE_GPUS = 8, 1
BATCH = 2  # prompts a step: the training rows / BATCH steps make an epoch


def overrides(
    work: Path | str,
    checkpoints: Path | str,
    *,
    steps: int,
    save_freq: int,
    nnodes: int = 1,
) -> list[str]:
    """main_ppo's overrides for inputs made by `inputs.make_inputs(work)`, saving every
    `save_freq` steps under `checkpoints`, on `nnodes` Ray nodes of one "GPU" each."""
    return [
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=false",
        f"data.train_files={work}/data/train.parquet", f"data.val_files={work}/data/val.parquet",
        f"data.train_batch_size={BATCH}", f"data.val_batch_size={BATCH}",
        "data.max_prompt_length=32", "data.max_response_length=16",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={work}/model",
        "actor_rollout_ref.model.use_remove_padding=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.use_kl_loss=false",
        # The CPU rollout; full_determinism makes verl send stable request ids, the agent loop
        # sets them from the sample (dataset index, session), and the rollout seeds each
        # request's sampling from the id and the weights' step.
        "actor_rollout_ref.rollout.name=rljob_cpu", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.full_determinism=true",
        "actor_rollout_ref.rollout.agent.default_agent_loop=rljob_cpu_single_turn",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        # One agent-loop and one reward worker (8 each by default: 16 processes importing verl
        # on a small machine), and a dense toy reward, so that GRPO's advantages are not all 0.
        "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1",
        "reward.custom_reward_function.path=pkg://rljob_verl_cpu.reward",
        "trainer.v1.sampler.custom_sampler.path=pkg://rljob_verl_cpu.sampler",
        "trainer.v1.sampler.custom_sampler.name=SampledOrderReplayBuffer",
        "trainer.device=cpu", f"trainer.nnodes={nnodes}", f"trainer.n_gpus_per_node={NODE_GPUS}",
        "trainer.logger=[console]", "trainer.test_freq=-1", "trainer.val_before_train=false",
        f"trainer.save_freq={save_freq}", f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=100",  # the steps end the run
        f"trainer.default_local_dir={checkpoints}",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "hydra.run.dir=.", "hydra.output_subdir=null",  # Hydra writes no folder of its own
    ]  # fmt: skip


def own_ray_cluster() -> list[str]:
    """The overrides for a driver that starts its own one-node Ray instead of joining one."""
    return [
        f"ray_kwargs.ray_init.num_cpus={NODE_CPUS}",
        f"+ray_kwargs.ray_init.num_gpus={NODE_GPUS}",
    ]


if __name__ == "__main__":  # one override a line for scripts: WORK CHECKPOINTS STEPS SAVE_FREQ
    work, checkpoints, steps, save_freq = sys.argv[1:5]
    print("\n".join(overrides(work, checkpoints, steps=int(steps), save_freq=int(save_freq))))
