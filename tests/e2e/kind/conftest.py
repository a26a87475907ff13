"""A kind cluster for the tests in this folder: a control plane and two workers on rootful podman,
the project's images and the Ray driver's test image on every node, the test device plugin's
GPUs on the workers, the operator installed by its Helm chart (rljob_testenv.stacks.KindStack;
the fixtures over it are chart_cluster's).

One cluster for the folder's tests, deleted at the end of the session whatever happened;
RLJOB_KIND_CLUSTER names one to reuse, and leave running. Checkpoints live in a host folder
every node mounts (kind's extraMounts), exposed as a ReadWriteMany PersistentVolume.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from chart_cluster import *  # noqa: F403 (the fixtures over `stack`)
from chart_cluster import say

REPO = Path(__file__).resolve().parents[3]
WORKERS = 2
GPUS_PER_NODE = 2  # a 1-node job of 2 ranks fits one worker; a 2-node job leaves room


@pytest.fixture(scope="session")
def stack() -> Iterator:
    """The cluster, up. A host that cannot run it (no podman, no cgroups, too little disk)
    fails here at once with what it lacks; every wait in its set-up has a deadline."""
    from rljob_testenv import images
    from rljob_testenv.stacks import START_ERRORS, KindStack

    reused = os.environ.get("RLJOB_KIND_CLUSTER")
    kind_stack = KindStack(reused or f"rljob-e2e-{os.getpid()}", REPO, WORKERS, GPUS_PER_NODE,
                           more_images=(images.ray_driver_image(),))  # fmt: skip
    try:
        try:
            kind_stack.up(say)
        except START_ERRORS as exc:
            pytest.fail(f"the kind cluster could not start: {exc}", pytrace=False)
        yield kind_stack
    finally:
        if not reused:
            kind_stack.down(say)
