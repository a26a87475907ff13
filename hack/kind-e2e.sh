#!/usr/bin/env bash
# rljob end to end on a kind cluster, the way `make test` runs it (tests/e2e/kind): a control plane
# and two workers holding the project's images, the Helm chart installed, a 2-pod job trained on
# CPU, one worker drained with `kubectl drain`, and the job resumed from the checkpoint it saved
# on that notice, its final weights bitwise equal to an uninterrupted run; a verl-shaped Ray job
# preempted by the scheduler and resumed the same way; and what a node does (eviction, OOM, pull
# errors, a power cut). The cluster is deleted at the end, whatever happened. See docs/kind.md.
#
#   hack/kind-e2e.sh                             # podman (rootful), offline: what ran here
#   RLJOB_KIND_PROVIDER=docker hack/kind-e2e.sh  # Docker as kind's provider
#   KEEP_CLUSTER=1 hack/kind-e2e.sh              # keep the cluster (named $CLUSTER) afterwards;
#                                                # a second run reuses it
#
# Arguments go to pytest (e.g. -x, --durations=5). Needs root, Python 3.11+, Go 1.26+, make.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLUSTER="${CLUSTER:-rljob-e2e}"
# Everything it runs, built once and cached: the venv, the pinned binaries, the images, the
# kind node image and kind itself.
make venv node-binaries images kind-image
if [[ "${KEEP_CLUSTER:-0}" == 1 ]]; then
    export RLJOB_KIND_CLUSTER="${CLUSTER}" # made if missing, and never deleted
    echo "keeping the cluster: KUBECONFIG=\$(.venv/bin/rljob testenv kind kubeconfig --name ${CLUSTER})"
fi
exec .venv/bin/pytest tests/e2e/kind -p no:cacheprovider -s "$@"
