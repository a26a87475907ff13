# The two commands a user needs: `make demo` and `make test`. Everything else is set-up they call.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The four distributions: the operator (pyproject.toml), the contract, the trainer and the test
# tooling. Reinstall whenever one of their pyproject.toml files or the lock file changes.
PROJECTS := pyproject.toml contract/pyproject.toml trainer_image/pyproject.toml devtools/pyproject.toml
LOCK := requirements/operator.lock
STAMP := $(VENV)/.installed-$(shell cat $(PROJECTS) $(LOCK) | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: all demo demo-verl demo-kind test unit cluster-test lint fmt venv binaries node-binaries kueue-binaries images kind-image host-deps lock cluster-up cluster-down clean chart-crds crd

all: test

$(STAMP): $(PROJECTS) $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# The operator's dependencies at the versions its image pins (the lock as a constraint).
	$(BIN)/python -m pip install --progress-bar off -c $(LOCK) \
	  -e ./contract -e ./trainer_image -e '.[dev]' -e ./devtools
	@# RLinf declares its whole toolchain (ruff, pre-commit, uv, gsutil, swanlab, ...) as runtime
	@# dependencies; the e2e tests need only its FSDP checkpoint code, whose imports torch and
	@# verl's dependencies cover.
	$(BIN)/python -m pip install --progress-bar off --no-deps 'rlinf==0.3.0'
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

## Kubernetes binaries (kube-apiserver, etcd, kwok, helm, ...), built once and cached.
binaries: venv
	$(BIN)/rljob testenv install

## And what kind's node image holds: kubelet, kubeadm, kube-proxy, containerd, crictl, CoreDNS
## and the test device plugin.
node-binaries: binaries
	$(BIN)/rljob testenv install --node-binaries

## And Kueue, for the tests of queued jobs (tests/cluster/test_kueue.py): every release they run
## on (rljob_testenv.binaries.KUEUE_VERSIONS: v0.17.0, v0.19.2), each cached apart; a release
## not yet built takes a few minutes from a warm Go build cache.
kueue-binaries: binaries
	$(BIN)/rljob testenv install --kueue

## The images kind's nodes run in tests/e2e/kind (the operator's, the trainer's and the Ray
## driver's test image), built with buildah where what they copy changed (cached under
## ~/.cache/rljob/images). Built before pytest: a cold build (torch from PyPI) can outlast one
## test's timeout.
images: venv host-deps
	$(BIN)/rljob testenv images

## The kind cluster's node image (tests/e2e/kind, docs/kind.md), built with buildah from the
## pinned binaries and kind's base layout where its inputs changed (about 1.5 minutes with the
## binaries built), and kind itself; before pytest, like the images.
kind-image: node-binaries host-deps
	$(BIN)/rljob testenv kind image

## What the tests need from Debian (root): podman, kind's provider (rootful, offline); runc,
## which buildah runs its steps with; catatonit (the pause image); mmdebstrap and buildah to
## build the images without Docker; CNI plugins, iptables and conntrack for podman's networks
## (kind's node image brings its own from mmdebstrap).
HOST_PACKAGES := runc containernetworking-plugins catatonit mmdebstrap buildah iptables conntrack podman
host-deps:
	@missing=$$(for p in $(HOST_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

## The operator image's pinned dependencies, resolved from pyproject.toml.
lock: venv
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --no-header --quiet \
	  --no-emit-package rljob-contract -o $(LOCK)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile trainer_image/Dockerfile tests/e2e/kind/ray-driver.Dockerfile

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## Unit tests only: no cluster, and none of the trainer's torchrun runs (tests/trainer/, minutes;
## `pytest -m trainer` runs them).
unit: venv
	$(BIN)/pytest -m "not cluster and not trainer" $(PYTEST_ARGS)

## The whole suite: lint, unit tests, tests on a local control plane with kwok nodes and node
## agents, tests on real nodes (kubelet + containerd, the images built from the Dockerfiles,
## the operator installed by the chart) and on a kind cluster (the same images and chart,
## tests/e2e/kind). The real nodes and kind need root, host-deps and ~30 GB of disk.
## pytest runs in two lanes at once (hack/test-lanes.sh); PYTEST_ARGS go to both.
test: venv host-deps node-binaries kueue-binaries images kind-image lint
	BIN=$(BIN) hack/test-lanes.sh $(PYTEST_ARGS)

## The main job: start a local cluster and run the demo.
demo: venv binaries
	$(BIN)/python hack/demo.py

## The demo with verl's own GRPO driver (python -m verl.trainer.main_ppo) as the job, on CPU.
demo-verl: venv binaries
	$(BIN)/python hack/demo.py --framework verl

## The same demo on a kind cluster: kind's nodes run the images built from the Dockerfiles,
## the operator installed by its chart (root, host-deps and ~20 GB of disk; the first run
## builds the trainer image, about 8 minutes).
demo-kind: venv host-deps kind-image
	$(BIN)/python hack/demo.py --kind --cluster demo-kind

## After editing crds/: the pod template's PodSpec (from the pinned Kubernetes release),
## docs/api.md and the chart's copy; tests/unit/operator/test_crd.py fails until they are current.
crd: venv
	$(BIN)/python hack/gen_pod_template_schema.py
	$(BIN)/python hack/gen_api_docs.py
	$(MAKE) chart-crds

## The Helm chart carries a copy of the CRD (a packaged chart cannot hold a symlink);
## tests/cluster/test_chart.py fails until the copy matches crds/ again.
chart-crds:
	cp crds/rljob.io_rltrainingjobs.yaml charts/rljob-operator/crds/rljob.io_rltrainingjobs.yaml

cluster-up: binaries
	$(BIN)/rljob testenv up

cluster-down: venv
	$(BIN)/rljob testenv down

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
