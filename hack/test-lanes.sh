#!/usr/bin/env bash
# `make test`'s pytest run: the suite in two lanes at once, one pytest process each.
#
# The cluster tests spend most of their time waiting on the control plane's own timers and
# watches (about a quarter of one core), while the trainer's torchrun runs keep both cores
# busy: side by side they take about as long as the slower of them alone. Each lane starts
# its own control plane where it needs one (its cluster is named after its pytest process),
# so no test sees the other lane's objects, and its own half of the test ports
# (rljob_testenv.ports), so no two servers of the two lanes are handed the same port.
#
#   lane "cpu":           tests/trainer, rljob's own jobs on node agents, test_recovery.py,
#                         tests/e2e/kind (one kind cluster: the drain and the node behaviour
#                         tests, which ran on real nodes until 2026-12-05), tests/unit (shown
#                         at its end)
#   lane "control-plane": the rest: tests/cluster, then the Ray jobs on node agents   (shown
#                         as it runs)
#
# The lanes are about even: 20 and 20 minutes of a 2-core machine in 2026-12 runs 2-10, about
# 30 each since (docs/testenv.md). On 2026-12-04, with verl's own driver in the Ray lane: cpu
# 18:52, control-plane 24:15, whole `make test` 24:48 warm. Then the kind e2e joined the cpu
# lane, and test_recovery.py and test_kueue.py (cluster tests, mostly waiting) left it: cpu
# 23:34 (kind 4:54 of it), control-plane 25:16 (the Ray e2e 11:53), whole 25:23 warm, with the
# reference runs cached (one run). Then test_recovery.py came back to the cpu lane, a real-node
# case and a Ray case went, and the TRL e2e joined the control-plane lane: cpu 23:46,
# control-plane 23:35, whole 23:55 warm (run 21); with the layouts' and relist's tests added,
# cpu 24:19 (the real nodes 358 s, 281 s the run before), control-plane 23:10, whole 24:55 (run
# 22), and TRL's resume test moved to the control-plane lane: cpu 24:38, control-plane 24:48,
# whole 25:22 (run 23). About 49 minutes of work in two lanes: at the 25-minute target. On
# 2026-12-05 (run 24): cpu 21:47, control-plane 21:49 (the Ray e2e 9:50), whole 22:21 warm.
# Then the real-node tests moved to the kind cluster (one cluster, each node on hard links of
# one image store): cpu 21:33 (kind 478 s), control-plane 22:06, whole 22:11 (run 26).
# With the Ray job on kind (2026-12-05, run 29): cpu 22:07, control-plane 21:54, whole 22:15;
# in run 28 the kind store was made again beside the other lane (the operator's image was in it
# then) and the whole took 25:29. Run 30 (2026-12-05, a quiet machine set up fresh that day):
# cpu 17:14, control-plane 17:32, whole 18:01; run 31, 40 minutes later with the host slower (the
# unit tests alone 2.1x): cpu 23:35, control-plane 25:01, whole 25:48.
#
# Arguments are passed to both pytest runs. Logs and JUnit reports are in .test-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
LOGS=.test-logs
mkdir -p "$LOGS"

# The cpu lane is named; the control-plane lane is everything else, so a new test file
# always runs somewhere.
# TRL's resume test (tests/trainer/test_trl_resume.py, half a minute) runs in the other lane.
CPU_LANE=(tests/trainer/test_megatron_resume.py tests/trainer/test_trainer_resume.py
  tests/trainer/test_trainer_runs.py tests/e2e/test_rljob_recovery.py tests/cluster/test_recovery.py
  tests/e2e/kind tests/unit)
# Each lane hands out ports from its own half of rljob_testenv.ports' range.
RLJOB_TEST_PORTS=20000-24999 "$BIN/pytest" "${CPU_LANE[@]}" --junitxml="$LOGS/cpu.xml" "$@" \
  >"$LOGS/cpu.log" 2>&1 &
cpu=$!
# Ctrl-C or a CI time-out: let the other lane tear its cluster and processes down too.
trap 'kill -INT "$cpu" 2>/dev/null; wait "$cpu"; exit 130' INT TERM
echo "lane cpu (${CPU_LANE[*]}): pid $cpu, log $LOGS/cpu.log"
echo "lane control-plane (the rest of tests/):"

RLJOB_TEST_PORTS=25000-29999 "$BIN/pytest" tests "${CPU_LANE[@]/#/--ignore=}" \
  --junitxml="$LOGS/control-plane.xml" "$@"
control_plane=$?
wait "$cpu"
cpu_rc=$?

echo
echo "==================== lane cpu ($LOGS/cpu.log) ===================="
cat "$LOGS/cpu.log"
echo "lane control-plane: exit $control_plane; lane cpu: exit $cpu_rc"
[ "$control_plane" -eq 0 ] && [ "$cpu_rc" -eq 0 ]
