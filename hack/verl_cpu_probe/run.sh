#!/usr/bin/env bash
# verl 0.9.1's real GRPO driver (`python -m verl.trainer.main_ppo`, the V1 trainer) on a
# CPU-only machine, outside Kubernetes (docs/frameworks.md, "verl's real driver on CPU"): a
# tiny random Qwen2, 4 training steps, checkpoints at steps 2 and 4. The CPU platform and the
# CPU rollout (`rollout.name=rljob_cpu`) are test support from devtools/rljob_verl_cpu, loaded
# into every verl process through verl's plugin switch. Not a test. Run from the repository
# root after `make venv`:
#     hack/verl_cpu_probe/run.sh [WORK_DIR [HYDRA_OVERRIDE...]]     (log: WORK_DIR/main_ppo.log)
# Extra overrides come last and win, e.g. a resume:
#     hack/verl_cpu_probe/run.sh /tmp/b trainer.resume_mode=resume_path \
#         trainer.resume_from_path=/tmp/a/ckpt/global_step_2
# With RAY_ADDRESS set, the driver joins that Ray cluster (which must offer 8 CPUs and 1 "GPU"
# per node) instead of starting its own, and the cluster is left running.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d /tmp/verl-cpu-probe.XXXX)}
shift $(($# > 0 ? 1 : 0))
python=${PYTHON:-.venv/bin/python}
mkdir -p "$work"
"$python" "$here/build_inputs.py" "$work"
export OMP_NUM_THREADS=1 HYDRA_FULL_ERROR=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
# verl's plugin switch loads the CPU platform and rollout in every verl process; the FSDP
# engine is registered for cuda and npu only, so it is chosen by name.
export VERL_USE_EXTERNAL_MODULES=rljob_verl_cpu
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
  # The CPU rollout; full_determinism makes verl send stable request ids ("det-<priority>"),
  # the agent loop sets the priority from the sample (dataset index, session), and the rollout
  # seeds each request's sampling from the id and the weights' step.
  actor_rollout_ref.rollout.name=rljob_cpu actor_rollout_ref.rollout.n=2
  actor_rollout_ref.rollout.full_determinism=true
  actor_rollout_ref.rollout.agent.default_agent_loop=rljob_cpu_single_turn
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2
  # One agent-loop and one reward worker (8 each by default: 16 processes importing verl on a
  # small machine), and a dense toy reward, so that GRPO's advantages are not all 0.
  actor_rollout_ref.rollout.agent.num_workers=1 reward.num_workers=1
  reward.custom_reward_function.path=pkg://rljob_verl_cpu.reward
  trainer.device=cpu trainer.nnodes=1 trainer.n_gpus_per_node=1 trainer.logger=[console]
  trainer.save_freq=2 trainer.test_freq=-1 trainer.total_training_steps=4 trainer.total_epochs=1
  trainer.default_local_dir="$work/ckpt" trainer.val_before_train=false
  hydra.run.dir="$work/hydra"
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1
)
if [ -z "${RAY_ADDRESS:-}" ]; then
  # Ray's logical resources only (the load stays on the machine's cores): verl's resource
  # pools want "GPU" bundles of 3 CPUs each, TransferQueue one CPU per actor.
  overrides+=(ray_kwargs.ray_init.num_cpus=8 +ray_kwargs.ray_init.num_gpus=1)
fi
start=$(date +%s)
timeout "${TIMEOUT:-900}" "$python" -m verl.trainer.main_ppo "${overrides[@]}" "$@" >"$work/main_ppo.log" 2>&1
rc=$?
echo "main_ppo exited $rc after $(($(date +%s) - start))s (log: $work/main_ppo.log)"
[ -n "${RAY_ADDRESS:-}" ] || "$python" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || true
grep -E "^[A-Za-z.]*(Error|Exception):" "$work/main_ppo.log" | tail -3
ls -d "$work"/ckpt/global_step_* 2>/dev/null
exit $rc
