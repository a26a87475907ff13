#!/usr/bin/env bash
# How far verl 0.9.1's real GRPO driver gets on a CPU-only machine (docs/frameworks.md, "verl's
# real driver on CPU"). Not a test: it ends at verl's rollout engine, which needs vLLM, SGLang
# or TensorRT-LLM. Run from the repository root after `make venv`:
#     hack/verl_cpu_probe/run.sh [WORK_DIR]      (log: WORK_DIR/main_ppo.log)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d /tmp/verl-cpu-probe.XXXX)}
python=${PYTHON:-.venv/bin/python}
mkdir -p "$work"
"$python" "$here/build_inputs.py" "$work"
export OMP_NUM_THREADS=1 HYDRA_FULL_ERROR=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
# verl's plugin switch loads the CPU platform in every verl process; the FSDP engine is
# registered for cuda and npu only, so it is chosen by name.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" VERL_USE_EXTERNAL_MODULES=verl_cpu_platform
export VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda VERL_ENGINE_VENDOR=nvidia
overrides=(
  algorithm.adv_estimator=grpo algorithm.use_kl_in_reward=false
  data.train_files="$work/data/train.parquet" data.val_files="$work/data/val.parquet"
  data.train_batch_size=2 data.val_batch_size=2 data.max_prompt_length=32
  data.max_response_length=16 data.dataloader_num_workers=0
  actor_rollout_ref.model.path="$work/model" actor_rollout_ref.model.use_remove_padding=false
  +actor_rollout_ref.model.override_config.attn_implementation=eager
  actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.ref.strategy=fsdp2
  actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
  actor_rollout_ref.actor.use_kl_loss=false
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=2
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2
  trainer.device=cpu trainer.nnodes=1 trainer.n_gpus_per_node=1 trainer.logger=[console]
  trainer.save_freq=1 trainer.test_freq=-1 trainer.total_training_steps=2 trainer.total_epochs=1
  trainer.default_local_dir="$work/ckpt" trainer.val_before_train=false
  hydra.run.dir="$work/hydra"
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  # Ray's logical resources only (the load stays on the machine's cores): verl's resource
  # pools want "GPU" bundles of 3 CPUs each, TransferQueue one CPU per actor.
  ray_kwargs.ray_init.num_cpus=8 +ray_kwargs.ray_init.num_gpus=1
)
timeout "${TIMEOUT:-600}" "$python" -m verl.trainer.main_ppo "${overrides[@]}" >"$work/main_ppo.log" 2>&1
echo "main_ppo exited $? (log: $work/main_ppo.log)"
"$python" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || true
grep -E "^[A-Za-z.]*(Error|Exception):" "$work/main_ppo.log" | tail -3
