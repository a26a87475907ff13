"""Fixtures of the end-to-end tests: node agents that run real trainers, the claim they
share, the operator reading that claim in-process (one AgentStack per test, on the lane's
control plane), and the uninterrupted reference run.

Teardown order matters: the operator (which deletes the test's jobs and waits for their
pods to go) stops before the agents that run those pods, so every fixture that needs
the agents to still be there depends on `stack`.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e_steps import CLAIM, POOL_LABEL, priority_classes_made, run_reference
from kube_steps import bind_claim
from rljob_nodeagent import AgentPool
from rljob_testenv.operator_process import OperatorProcess, stop_after_the_tests_jobs
from rljob_testenv.stacks import AgentStack


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
def stack(cluster_name: str, namespace: str, tmp_path: Path) -> Iterator[AgentStack]:
    """The test's AgentStack on the lane's control plane (rljob_testenv.stacks, as the demo's):
    no nodes until the test asks for them (`agents`), the operator where it asks for it
    (`e2e_operator`). At the end the operator and the agents stop, and no process of their
    pods may outlive them."""
    stack = AgentStack(namespace, tmp_path, CLAIM, gpus_per_node=1, nodes=0,
                       control_plane=cluster_name, labels={POOL_LABEL: namespace})  # fmt: skip
    stack.up(say=print)
    yield stack
    stack.stop()
    left = stack.live_processes()
    assert not left, f"processes of the agents' pods outlived them: {left}"


@pytest.fixture
def claim(core, namespace: str, stack: AgentStack) -> Iterator[Path]:
    """The claim `ckpts`, bound to a volume of the test; the agents map it to one local
    directory, which this yields."""
    folder, volume = stack.claim_volume(f"{CLAIM}-{namespace}", namespace, CLAIM)
    pv = bind_claim(core, namespace, CLAIM, volume)
    yield folder
    core.delete_persistent_volume(pv)


AgentFactory = Callable[..., AgentPool]


@pytest.fixture
def agents(stack: AgentStack) -> AgentFactory:
    """Start node agents for the test: agents(count, gpus=1, extra_env=None) -> AgentPool.

    Their nodes carry the pool label `rljob.io/e2e-pool=<namespace>`, which the test's jobs
    select, so that neither the cluster's kwok nodes nor another test's agents get them.
    """
    return stack.add_agents


@pytest.fixture
def e2e_operator(crd, namespace: str, claim, stack: AgentStack) -> Iterator[OperatorProcess]:
    """The operator, reading the claim's local directory in-process; at the end the test's
    jobs are deleted while it runs, so that it releases their pods before the agents go."""
    stack.start_operator(namespace, say=print)
    assert stack.operator is not None
    yield stack.operator
    stop_after_the_tests_jobs(stack.operator)


@pytest.fixture
def priority_classes(api_client, namespace: str, stack: AgentStack) -> Iterator[tuple[str, str]]:
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
