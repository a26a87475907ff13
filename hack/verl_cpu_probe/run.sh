#!/usr/bin/env bash
# verl 0.9.1's real GRPO driver (`python -m verl.trainer.main_ppo`, the V1 trainer) on a
# CPU-only machine, outside Kubernetes (docs/frameworks.md, "verl's real driver on CPU"): a
# tiny random Qwen2, 4 training steps, checkpoints at steps 2 and 4. The environment and the
# overrides are test support's (devtools/rljob_verl_cpu/recipe.py), as the e2e tests use them.
# Not a test. Run from the repository root after `make venv`:
#     hack/verl_cpu_probe/run.sh [WORK_DIR [HYDRA_OVERRIDE...]]     (log: WORK_DIR/main_ppo.log)
# Extra overrides come last and win, e.g. a resume:
#     hack/verl_cpu_probe/run.sh /tmp/b trainer.resume_mode=resume_path \
#         trainer.resume_from_path=/tmp/a/ckpt/global_step_2
# With RAY_ADDRESS set, the driver joins that Ray cluster (which must offer 8 CPUs and 1 "GPU"
# per node) instead of starting its own, and the cluster is left running.
set -uo pipefail
work=${1:-$(mktemp -d /tmp/verl-cpu-probe.XXXX)}
shift $(($# > 0 ? 1 : 0))
python=${PYTHON:-.venv/bin/python}
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
mkdir -p "$work"
"$python" -m rljob_verl_cpu.inputs "$work" 8
eval "$("$python" -c 'from rljob_verl_cpu.recipe import ENV; import shlex
print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in ENV.items()))')"
mapfile -t overrides < <("$python" -m rljob_verl_cpu.recipe "$work" "$work/ckpt" 4 2)
if [ -z "${RAY_ADDRESS:-}" ]; then
  mapfile -t -O "${#overrides[@]}" overrides < <("$python" -c \
    'from rljob_verl_cpu.recipe import own_ray_cluster; print("\n".join(own_ray_cluster()))')
fi
start=$(date +%s)
(cd "$work" && timeout "${TIMEOUT:-900}" "$python" -m verl.trainer.main_ppo \
  "${overrides[@]}" "$@") >"$work/main_ppo.log" 2>&1
rc=$?
echo "main_ppo exited $rc after $(($(date +%s) - start))s (log: $work/main_ppo.log)"
[ -n "${RAY_ADDRESS:-}" ] || "$python" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || true
grep -E "^[A-Za-z.]*(Error|Exception):" "$work/main_ppo.log" | tail -3
ls -d "$work"/ckpt/global_step_* 2>/dev/null
exit $rc
