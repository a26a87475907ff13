# The rljob operator image: `rljob operator`, plus the `rljob ckpt` tools its inspector pods run.
# Build from the repository root:  docker build -t rljob-operator:dev .
# Slim and torch-free: the operator and the checkpoint inspector never need torch.

FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY trainer_image ./trainer_image
COPY devtools ./devtools
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && pip wheel --no-cache-dir --wheel-dir /wheels \
      "kopf>=1.37" "kubernetes>=31" "pyyaml>=6" "prometheus-client>=0.20"

FROM python:3.11.11-slim-bookworm
LABEL org.opencontainers.image.title="rljob-operator" \
      org.opencontainers.image.description="Keeps RL training jobs running through preemption" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels /wheels/*.whl \
 && rm -rf /wheels \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin rljob
USER 65532:65532
ENTRYPOINT ["rljob"]
CMD ["operator"]
