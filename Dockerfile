# The rljob operator image: `rljob operator`, plus the `rljob ckpt` tools its inspector pods run.
# Build from the repository root:  docker build -t rljob-operator:dev .
# Slim and torch-free: the operator and the checkpoint inspector never need torch.
#
# Made for the Helm chart (charts/rljob-operator) and its "restricted" pod: a numeric non-root
# user (65532:65532, the chart's runAsUser/runAsGroup), nothing written at runtime (the chart
# mounts a read-only root filesystem and an emptyDir on /tmp), the entrypoint `rljob` with the
# chart passing `operator ...` as arguments. For reproducible builds, pin the base image by digest
# as well (FROM python:3.11.11-slim-bookworm@sha256:...).

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contract ./contract
COPY operator ./operator
COPY trainer_image ./trainer_image
COPY devtools ./devtools
# rljob itself, then every runtime dependency at the version the test suite ran with
# (the dependencies of kopf, kubernetes, pyyaml and prometheus-client, resolved and pinned).
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && pip wheel --no-deps --wheel-dir /wheels \
      kopf==1.45.2 kubernetes==37.0.2 pyyaml==6.0.4 prometheus-client==0.26.0 \
      aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiohttp-retry==2.9.1 aiosignal==1.4.0 \
      annotated-types==0.8.0 attrs==26.1.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3 \
      click==8.5.1 durationpy==0.11 frozenlist==1.8.0 idna==3.20 iso8601==2.1.0 \
      jsonpatch==1.48 jsonpointer==3.12 multidict==7.2.1 oauthlib==4.0.1 propcache==0.5.4 \
      pydantic==2.14.4 pydantic-core==2.50.5 python-dateutil==4.0.0 python-json-logger==4.2.0 \
      requests==2.34.2 requests-oauthlib==2.0.0 typing-extensions==4.16.0 \
      typing-inspection==0.4.5 tzdata==2026.6 urllib3==2.8.0 websocket-client==1.9.2

FROM python:3.11.11-slim-bookworm
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
