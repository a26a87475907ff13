#!/usr/bin/env bash
# The one command for a lent GPU machine (torch, numpy, safetensors there; not omegaconf,
# antlr4 nor our packages): run from the repository root with the ignored folder .gpu_carry/
# carried along (omegaconf, antlr4, and PyYAML as a fallback), results under $OUT.
#
#   OUT=/some/dir bash benchmarks/gpu_run.sh [trainer_gpu.py options, e.g. --quick]
#
# PYTHON (default python3) and TOTAL_TIMEOUT (default 420 s) may be set; every trainer_gpu.py
# part writes $OUT/trainer_gpu.json as it finishes, so a run cut short still reports.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder for results}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"

carry="$PWD/.gpu_carry"
export PYTHONPATH="$carry:$PWD/contract:$PWD/trainer_image${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c "import yaml" 2>/dev/null; then
    export PYTHONPATH="$PYTHONPATH:$carry/fallback"  # pure-Python PyYAML, only if none there
fi
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1

{
    echo "== $(date -Is) $(hostname) PYTHONPATH=$PYTHONPATH"
    nvidia-smi -L || echo "no nvidia-smi"
    nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv || true
    nproc; free -g | head -2; df -h /tmp /dev/shm . 2>/dev/null
    "$PYTHON" -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
    "$PYTHON" -c "import omegaconf, antlr4, yaml, rljob_contract, rljob_trainer.config as c; print('imports ok: omegaconf', omegaconf.__version__, 'yaml', yaml.__file__)"
} 2>&1 | tee "$LOG"

timeout -k 10 "${TOTAL_TIMEOUT:-420}" \
    "$PYTHON" benchmarks/trainer_gpu.py --out "$OUT/trainer_gpu.json" "$@" 2>&1 | tee -a "$LOG"
code=${PIPESTATUS[0]}
{
    echo "== trainer_gpu.py exit $code at $(date -Is)"
    nvidia-smi --query-gpu=memory.used --format=csv 2>/dev/null || true
} 2>&1 | tee -a "$LOG"
exit "$code"
