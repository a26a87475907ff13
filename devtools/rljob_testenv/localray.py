"""A Ray cluster of several nodes on this machine, outside Kubernetes: where a Ray driver's
uninterrupted reference run goes (the e2e tests' and the verl demo's), with the same number of
Ray nodes as the job's gang.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rljob_podside.ray_node import head_reachable

from .ports import free_port

RAY = Path(sys.executable).with_name("ray")


@contextmanager
def local_ray_cluster(
    nnodes: int,
    logs: Path,
    node_args: tuple[str, ...] = ("--num-cpus=1",),
    env: dict[str, str] | None = None,
) -> Iterator[tuple[str, dict[str, str]]]:
    """`ray start` for a head and nnodes-1 workers on this machine, each with `node_args` and
    `env` on top of this process's environment; yields the head address and the environment
    its clients need, once every node is alive in the head's GCS.

    The GCS listens seconds before the head's raylet registers in it, and a worker's
    `ray start` or a driver's `ray.init` gives up when it finds no head there in time (40 s,
    60 s): so workers start once the head is registered, and the driver once all are. It asks
    the GCS itself (one cheap call), never `ray status` (a Python process of about 3 s each,
    on the cores the nodes start on). Node n writes to `logs`/node-n.log.

    Each node runs `--block` in a session of its own, so that stopping it ends its Ray
    processes and no one else's (never `ray stop`, which would end every Ray on the host).
    The cluster and its clients get a home of their own, as the node agent gives each pod:
    Ray 2.60 turns token authentication on for every head started where `~/.ray/auth_token`
    exists (any local `ray.init()` on the host writes one), and its clients then fail.
    """
    from ray._raylet import GcsClient  # Ray's own GCS client, as `ray status` uses it

    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes: list[subprocess.Popen] = []
    temp = Path(tempfile.mkdtemp(prefix="rjref-", dir="/tmp"))
    (temp / "home").mkdir()
    env = {**os.environ, **(env or {}), "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(temp / "home")}
    logs.mkdir(parents=True, exist_ok=True)

    def start(rank: int, role: list[str]) -> None:
        with (logs / f"node-{rank}.log").open("wb") as log:
            nodes.append(subprocess.Popen(
                [str(RAY), "start", *role, f"--temp-dir={temp}/n{rank}", "--block",
                 *node_args, "--disable-usage-stats"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip

    try:
        start(0, ["--head", f"--port={port}", "--include-dashboard=false"])
        _wait(lambda: head_reachable(address), "the local Ray head's GCS")
        gcs = GcsClient(address=address)
        _wait(lambda: _alive_nodes(gcs, nodes) == 1, "the local Ray head")
        for rank in range(1, nnodes):
            start(rank, [f"--address={address}"])
        _wait(lambda: _alive_nodes(gcs, nodes) == nnodes, f"{nnodes} local Ray nodes")
        yield address, env
    finally:
        for node in nodes:  # SIGKILL: SIGTERM would drain each node for 30 s
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait(30)
        shutil.rmtree(temp, ignore_errors=True)


def _wait(ready: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def _alive_nodes(gcs: Any, nodes: list[subprocess.Popen]) -> int:
    """How many Ray nodes the GCS holds alive; RuntimeError once a node's `ray start` ended."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    for rank, node in enumerate(nodes):
        if node.poll() is not None:
            raise RuntimeError(f"local Ray node {rank} exited with {node.returncode}")
    try:
        shown = gcs.get_all_node_info(timeout=5)
    except Exception:  # the GCS's RPC errors while the head starts: "not yet"
        return 0
    return sum(1 for info in shown.values() if info.state == GcsNodeInfo.GcsNodeState.ALIVE)
