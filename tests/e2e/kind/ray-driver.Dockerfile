# Test tooling, never shipped (rljob_testenv.images.ray_driver_image builds it, with
# tests/e2e as the context): rljob's trainer image plus Ray, verl and the Ray driver of the
# e2e tests, for a verl-shaped Ray job on kind. PACKAGES pins each library at the version of
# the environment that made the uninterrupted reference run.
ARG TRAINER_IMAGE=localhost/rljob-trainer:cpu
FROM ${TRAINER_IMAGE}
ARG PACKAGES

USER 0
# hadolint ignore=DL3013
RUN test -n "${PACKAGES}" && pip install --no-cache-dir ${PACKAGES}
COPY ray_trainer.py /opt/rljob-e2e/ray_trainer.py
USER 65532:65532
ENTRYPOINT []
CMD ["python", "/opt/rljob-e2e/ray_trainer.py", "verl"]
