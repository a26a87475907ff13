"""Fixtures of the end-to-end tests: node agents that run real trainers, the claim they
share, the operator reading that claim in-process, and the uninterrupted reference run.

Teardown order matters: the operator (which deletes the test's jobs and waits for their
pods to go) stops before the agents that run those pods, so every fixture that needs
the agents to still be there depends on `agents`.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from e2e_steps import CLAIM, POOL_LABEL, priority_classes_made, run_reference
from kube_steps import bind_claim
from rljob_nodeagent import AgentPool, claim_dir
from rljob_nodeagent.agent import DEFAULT_SHAPE
from rljob_testenv.operator_process import OperatorProcess, run_operator


@pytest.fixture(scope="session")
def e2e_seed() -> int:
    """One seed per session (RLJOB_E2E_SEED repeats a run); every test prints its own."""
    return int(os.environ.get("RLJOB_E2E_SEED") or random.randrange(1_000_000))


@pytest.fixture
def rng(e2e_seed: int, request: pytest.FixtureRequest) -> random.Random:
    print(f"e2e seed {e2e_seed} (RLJOB_E2E_SEED={e2e_seed} repeats these interruptions)")
    return random.Random(f"{e2e_seed}:{request.node.name}")


@pytest.fixture(scope="session")
def reference() -> Path:
    """The uninterrupted run of the e2e config (world size 2): its checkpoint directory."""
    return run_reference()


@pytest.fixture(scope="session")
def megatron_reference() -> Path:
    """The same for the Megatron backend (TP2 over the two ranks)."""
    return run_reference(backend="megatron")


@pytest.fixture
def agent_root(tmp_path: Path) -> Path:
    return tmp_path / "nodeagent"


@pytest.fixture
def claim(core, namespace: str, agent_root: Path) -> Iterator[Path]:
    """The claim `ckpts`, bound to a volume of the test; the agents map it to one local
    directory, which this yields."""
    pv = bind_claim(core, namespace, CLAIM)
    yield claim_dir(agent_root, namespace, CLAIM)
    core.delete_persistent_volume(pv)


AgentFactory = Callable[..., AgentPool]


@pytest.fixture
def agents(kubeconfig: Path, namespace: str, agent_root: Path) -> Iterator[AgentFactory]:
    """Start node agents for the test: agents(count, gpus=1, extra_env=None) -> AgentPool.

    Their nodes carry the pool label `rljob.io/e2e-pool=<namespace>`, which the test's jobs
    select, so that neither the cluster's kwok nodes nor another test's agents get them.
    """
    pools: list[AgentPool] = []

    def start(count: int, gpus: int = 1, extra_env=None) -> AgentPool:
        prefix = f"{namespace}-{uuid.uuid4().hex[:4]}"
        pool = AgentPool(
            kubeconfig, agent_root, [f"{prefix}-{i}" for i in range(count)],
            replace(DEFAULT_SHAPE, gpus=gpus), labels={POOL_LABEL: namespace}, extra_env=extra_env,
            heartbeat_seconds=5,
        )  # fmt: skip
        pools.append(pool)
        return pool.start()

    yield start
    for pool in pools:
        pool.stop()
        left = pool.live_processes()
        assert not left, f"processes of the agents' pods outlived them: {left}"


@pytest.fixture
def e2e_operator(kubeconfig, namespace, crd, claim, agents, tmp_path):
    """The operator, reading the claim's local directory in-process."""
    process = OperatorProcess(
        kubeconfig,
        namespace,
        tmp_path / "operator.log",
        RLJOB_CHECKPOINT_VOLUMES=f"{CLAIM}={claim}",
    )
    yield from run_operator(process)


@pytest.fixture
def priority_classes(api_client, namespace: str, agents) -> Iterator[tuple[str, str]]:
    """(low, high): the job runs low; a pod of the high class preempts it. Removed before the
    agents stop."""
    with priority_classes_made(api_client, namespace) as names:
        yield names


def pytest_terminal_summary(terminalreporter) -> None:
    """The e2e tests' reports (seed, where each job was interrupted, its recoveries)."""
    from e2e_steps import REPORTS

    if REPORTS:
        terminalreporter.section("rljob end-to-end runs")
        for report in REPORTS:
            terminalreporter.write_line(report)
