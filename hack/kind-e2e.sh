#!/usr/bin/env bash
# End to end on kind (needs Docker): build the operator and trainer images, load them into a kind
# cluster, install the Helm chart, run the demo job on CPU, evict its pod as a preemption would,
# and wait for the job to resume from its newest complete checkpoint and succeed.
#
#   hack/kind-e2e.sh                       # everything; deletes the cluster it created at the end
#   KEEP_CLUSTER=1 hack/kind-e2e.sh        # keep the cluster to look around afterwards
#   SKIP_BUILD=1 hack/kind-e2e.sh          # reuse images built earlier
#
# Settings (environment): CLUSTER (rljob-e2e), TAG (e2e), OPERATOR_NS (rljob-system),
# JOB_NS (rljob-demo), MAX_STEPS (60), SAVE_INTERVAL (10), TRAIN_TIMEOUT (seconds, 1800).
# See docs/kind.md.
set -euo pipefail

CLUSTER="${CLUSTER:-rljob-e2e}"
TAG="${TAG:-e2e}"
OPERATOR_REPOSITORY="${OPERATOR_REPOSITORY:-rljob-operator}"
TRAINER_REPOSITORY="${TRAINER_REPOSITORY:-rljob-trainer}"
OPERATOR_NS="${OPERATOR_NS:-rljob-system}"
JOB_NS="${JOB_NS:-rljob-demo}"
JOB="${JOB:-grpo-demo}"
CLAIM="${CLAIM:-rljob-checkpoints}"
MAX_STEPS="${MAX_STEPS:-60}"
SAVE_INTERVAL="${SAVE_INTERVAL:-10}"
TRAIN_TIMEOUT="${TRAIN_TIMEOUT:-1800}"
KEEP_CLUSTER="${KEEP_CLUSTER:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"

OPERATOR_IMAGE="${OPERATOR_REPOSITORY}:${TAG}"
TRAINER_IMAGE="${TRAINER_REPOSITORY}:${TAG}"
CONTEXT="kind-${CLUSTER}"
CKPT_DIR="/checkpoints/${JOB}/checkpoints"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}"

log() { printf '\n==> %s\n' "$*"; }
die() {
    printf 'kind-e2e: %s\n' "$*" >&2
    exit 1
}
k() { kubectl --context "${CONTEXT}" "$@"; }
jobk() { k --namespace "${JOB_NS}" "$@"; }
field() { jobk get rltj "${JOB}" -o "jsonpath={$1}"; }

# Poll a command until it succeeds: wait_until SECONDS WHAT COMMAND...
wait_until() {
    local timeout="$1" what="$2"
    shift 2
    local deadline=$((SECONDS + timeout))
    until "$@"; do
        ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for ${what}"
        sleep 5
    done
}

diagnostics() {
    printf '\n==> diagnostics\n' >&2
    k get rltj,pods,pvc --all-namespaces -o wide >&2 || true
    jobk get events --sort-by=.lastTimestamp >&2 || true
    k --namespace "${OPERATOR_NS}" logs deployment/rljob-operator --tail=100 >&2 || true
}

CREATED=0 # this run created the cluster
READY=0   # the cluster is there: diagnostics make sense
finish() {
    local status=$?
    if ((status != 0 && READY == 1)); then
        diagnostics
    fi
    if ((CREATED == 1)) && [[ "${KEEP_CLUSTER}" != 1 ]]; then
        log "deleting kind cluster ${CLUSTER} (KEEP_CLUSTER=1 keeps it)"
        kind delete cluster --name "${CLUSTER}" || true
    fi
    exit "${status}"
}
trap finish EXIT

for tool in docker kind kubectl helm; do
    command -v "${tool}" >/dev/null || die "needs ${tool} on the PATH (see docs/kind.md)"
done
docker info >/dev/null 2>&1 || die "needs a running Docker engine"

if [[ "${SKIP_BUILD}" != 1 ]]; then
    log "building ${OPERATOR_IMAGE} (Dockerfile) and ${TRAINER_IMAGE} (trainer_image/Dockerfile)"
    docker build --tag "${OPERATOR_IMAGE}" .
    docker build --tag "${TRAINER_IMAGE}" --file trainer_image/Dockerfile .
fi

if kind get clusters | grep --quiet --line-regexp "${CLUSTER}"; then
    log "using the existing kind cluster ${CLUSTER}"
else
    log "creating kind cluster ${CLUSTER}"
    CREATED=1
    kind create cluster --name "${CLUSTER}" --wait 120s
fi
READY=1

log "loading the images into the cluster's node"
kind load docker-image --name "${CLUSTER}" "${OPERATOR_IMAGE}" "${TRAINER_IMAGE}"

log "namespaces: ${OPERATOR_NS} (Pod Security: restricted) and ${JOB_NS}"
for ns in "${OPERATOR_NS}" "${JOB_NS}"; do
    k create namespace "${ns}" --dry-run=client --output yaml | k apply --filename -
done
# The operator's pod must pass the "restricted" Pod Security Standard.
k label namespace "${OPERATOR_NS}" --overwrite \
    pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest

log "installing the chart (release rljob in ${OPERATOR_NS}, watching ${JOB_NS})"
helm upgrade --install rljob charts/rljob-operator \
    --kube-context "${CONTEXT}" --namespace "${OPERATOR_NS}" \
    --set image.repository="${OPERATOR_REPOSITORY}" \
    --set image.tag="${TAG}" \
    --set image.pullPolicy=Never \
    --set "watchNamespaces={${JOB_NS}}" \
    --wait --timeout 5m
k --namespace "${OPERATOR_NS}" rollout status deployment/rljob-operator --timeout=120s

# kind's default StorageClass (local-path) is ReadWriteOnce: one node. The gang is therefore one
# pod (nnodes: 1) with two trainer processes (nprocPerNode: 2); the inspector pod that reads the
# checkpoints runs on the same node. On a real cluster use a ReadWriteMany volume and nnodes > 1.
log "a checkpoint claim and the demo job (1 pod x 2 processes, CPU)"
jobk apply --filename - <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: ${CLAIM}
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: rljob.io/v1alpha1
kind: RLTrainingJob
metadata:
  name: ${JOB}
spec:
  framework: rljob
  image: ${TRAINER_IMAGE}
  imagePullPolicy: IfNotPresent
  nnodes: 1
  nprocPerNode: 2
  args: ["--config", "/app/configs/grpo_tiny.yaml", "runner.max_steps=${MAX_STEPS}"]
  resources:
    requests: {cpu: "1", memory: 2Gi}
    limits: {memory: 6Gi}
  checkpoint:
    volume:
      persistentVolumeClaim:
        claimName: ${CLAIM}
    mountPath: /checkpoints
    directory: ${JOB}/checkpoints
    saveInterval: ${SAVE_INTERVAL}
    maxToKeep: 3
    resume: auto
  restartPolicy:
    maxFailures: 3
  template:
    spec:
      terminationGracePeriodSeconds: 120
EOF

phase_is() { [[ "$(field .status.phase 2>/dev/null)" == "$1" ]]; }
log "waiting for the job to run (the first run pulls nothing: the images are loaded)"
wait_until 900 "the job to be Running" phase_is Running
trainer_pod() {
    jobk get pods --selector "rljob.io/job-name=${JOB},rljob.io/role=trainer" \
        --field-selector status.phase=Running --output 'jsonpath={.items[0].metadata.name}'
}
has_checkpoint() {
    local pod
    pod="$(trainer_pod)" || return 1
    [[ -n "${pod}" ]] || return 1
    jobk exec "${pod}" --container trainer -- ls "${CKPT_DIR}" 2>/dev/null | grep --quiet '^global_step_'
}
log "waiting for the first checkpoint in ${CKPT_DIR}"
wait_until "${TRAIN_TIMEOUT}" "a checkpoint" has_checkpoint
POD="$(trainer_pod)"
NODE="$(jobk get pod "${POD}" --output 'jsonpath={.spec.nodeName}')"
jobk exec "${POD}" --container trainer -- ls "${CKPT_DIR}"

log "preemption: evicting ${POD} from ${NODE} (kubectl drain), then uncordoning the node"
k drain "${NODE}" --pod-selector "rljob.io/job-name=${JOB}" \
    --ignore-daemonsets --delete-emptydir-data --timeout=300s
k uncordon "${NODE}"

log "waiting for the next attempt"
recovered() {
    [[ "$(field .status.attempt)" -ge 1 ]] \
        && [[ "$(field .status.phase)" =~ ^(Running|Succeeded)$ ]]
}
wait_until 900 "attempt 1 to run" recovered

log "waiting for the job to succeed"
jobk wait "rltj/${JOB}" --for=jsonpath='{.status.phase}'=Succeeded --timeout="${TRAIN_TIMEOUT}s"

log "the job"
jobk get rltj "${JOB}"
printf '\nrecoveries: %s\n' "$(field .status.recoveries)"
jobk get events --field-selector "involvedObject.name=${JOB}" --sort-by=.lastTimestamp

RESUMED="$(field '.status.recoveries[0].resumedFromStep')"
PREEMPTIONS="$(field .status.preemptions)"
[[ "${PREEMPTIONS}" == 1 ]] || die "expected 1 preemption, the job counted ${PREEMPTIONS:-none}"
[[ -n "${RESUMED}" && "${RESUMED}" -gt 0 ]] \
    || die "the second attempt did not resume from a checkpoint (resumedFromStep: ${RESUMED:-none})"
log "OK: preempted once, resumed from step ${RESUMED}, succeeded"
