# The rljob operator image: `rljob operator`, plus the `rljob ckpt` tools its inspector pods run.
# Build from the repository root:  docker build -t rljob-operator:dev .
# Slim and torch-free: the operator and the checkpoint inspector never need torch.
#
# Made for the Helm chart (charts/rljob-operator) and its "restricted" pod: a numeric non-root
# user (65532:65532, the chart's runAsUser/runAsGroup), nothing written at runtime (the chart
# mounts a read-only root filesystem and an emptyDir on /tmp), the entrypoint `rljob` with the
# chart passing `operator ...` as arguments. For reproducible builds, pin the base image by digest
# as well (--build-arg BASE_IMAGE=python:3.11.11-slim-bookworm@sha256:...).
#
# BASE_IMAGE is any Debian-like image with python, pip and venv on PATH (`rljob testenv images`
# builds on a local one, made with mmdebstrap, where no registry is reachable).
ARG BASE_IMAGE=python:3.11.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contract ./contract
COPY operator ./operator
COPY requirements/operator.lock ./requirements/
# The operator and the contract (not the trainer: no torch here), then every runtime
# dependency at the version in the lock file (`make lock` resolves pyproject.toml's
# dependencies into it; the dev environment is installed under it as a constraint too).
RUN pip wheel --no-deps --wheel-dir /wheels ./contract . \
 && pip wheel --no-deps --wheel-dir /wheels -r requirements/operator.lock

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="rljob-operator" \
      org.opencontainers.image.description="Keeps RL training jobs running through preemption" \
      org.opencontainers.image.licenses="Apache-2.0"
# No .pyc written at runtime (pip compiles them at install time): the root filesystem is read-only.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
# Install offline from the pinned wheels only (a missing pin fails the build rather than
# fetching something unpinned), then drop the wheels and the packaging tools.
RUN pip install --no-index --find-links /wheels /wheels/*.whl \
 && rm -rf /wheels \
 && python -m pip uninstall --yes pip setuptools wheel \
 && groupadd --gid 65532 rljob \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin rljob
WORKDIR /
USER 65532:65532
# 8080: Prometheus /metrics (--metrics-port); 8081: kopf's /healthz (--liveness), as the chart sets.
EXPOSE 8080 8081
ENTRYPOINT ["rljob"]
CMD ["operator"]
