#!/usr/bin/env bash
# `make test`'s pytest run: the suite in two lanes at once, one pytest process each.
#
# The cluster tests spend most of their time waiting on the control plane's own timers and
# watches (about a quarter of one core), while the trainer's torchrun runs keep both cores
# busy: side by side they take about as long as the slower of them alone. Each lane starts
# its own control plane (its cluster is named after its pytest process), so no test sees the
# other lane's objects. The node-agent tests (real trainers on this machine's loopback) stay
# in one lane, so that no two of them ever pick ports at the same time.
#
#   lane "control-plane": tests/cluster, then tests/e2e on node agents   (shown as it runs)
#   lane "cpu":           tests/trainer, then tests/e2e/real, then tests/unit   (shown at its end)
#
# Arguments are passed to both pytest runs. Logs and JUnit reports are in .test-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
LOGS=.test-logs
mkdir -p "$LOGS"

"$BIN/pytest" tests/trainer tests/e2e/real tests/unit \
  --junitxml="$LOGS/cpu.xml" "$@" >"$LOGS/cpu.log" 2>&1 &
cpu=$!
# Ctrl-C or a CI time-out: let the other lane tear its cluster and processes down too.
trap 'kill -INT "$cpu" 2>/dev/null; wait "$cpu"; exit 130' INT TERM
echo "lane cpu (tests/trainer, tests/e2e/real, tests/unit): pid $cpu, log $LOGS/cpu.log"
echo "lane control-plane (tests/cluster, tests/e2e on node agents):"

"$BIN/pytest" tests/cluster tests/e2e --ignore=tests/e2e/real \
  --junitxml="$LOGS/control-plane.xml" "$@"
control_plane=$?
wait "$cpu"
cpu_rc=$?

echo
echo "==================== lane cpu ($LOGS/cpu.log) ===================="
cat "$LOGS/cpu.log"
echo "lane control-plane: exit $control_plane; lane cpu: exit $cpu_rc"
[ "$control_plane" -eq 0 ] && [ "$cpu_rc" -eq 0 ]
