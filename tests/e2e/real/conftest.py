"""Real nodes for the tests in this folder: kubelets and containerds running the project's
images, with the operator installed by its Helm chart (rljob_testenv.stacks.RealNodeStack; the
fixtures over it are chart_cluster's).

One cluster for the folder (`rljob testenv up --real-nodes 2`; RLJOB_REAL_CLUSTER names one to
reuse, and leave running). The chart installs the operator into a namespace under the
"restricted" Pod Security Standard, watching the jobs' namespace; checkpoints live on a
hostPath PersistentVolume, ReadWriteMany, bound to the claim the jobs name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from chart_cluster import (  # noqa: F401 (fixtures)
    chart_operator,
    cluster_api,
    cluster_core,
    jobs_namespace,
    say,
    shared_claim,
    what_the_cluster_showed,
)

REAL_NODES = 2
GPUS_PER_NODE = 2  # a 1-node job of 2 ranks fits one node; a 2-node job leaves room


@pytest.fixture(scope="module")
def stack() -> Iterator:
    from rljob_testenv.stacks import START_ERRORS, RealNodeStack

    reused = os.environ.get("RLJOB_REAL_CLUSTER")
    real = RealNodeStack(reused or f"real-{os.getpid()}", Path(__file__).resolve().parents[3],
                         GPUS_PER_NODE, REAL_NODES)  # fmt: skip
    left_running = bool(reused) and real.exists()
    try:
        try:
            real.up(say)
        except START_ERRORS as exc:
            pytest.fail(f"the real nodes could not start: {exc}", pytrace=False)
        yield real
    finally:
        if not left_running:
            real.down(say)
