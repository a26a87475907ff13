"""The clusters rljob's demo and its end-to-end tests run on, behind one protocol.

A `Stack` is a control plane, nodes that run pods, and rljob's operator: node agents
(devtools/rljob_nodeagent: stand-in kubelets that run each pod's command as a local process,
docs/nodeagent.md) under the operator as a local process (`make demo`, the e2e tests of
tests/e2e on node agents), or kind's nodes (kubelets and containerds in podman containers,
docs/kind.md) under the operator its Helm chart installs (`make demo-kind`, tests/e2e/kind).
hack/demo.py and the fixtures of tests/e2e/chart_cluster.py see only the protocol.

Each checkpoint volume is a host folder every node sees, exposed as a ReadWriteMany
PersistentVolume reserved for one claim: what an NFS or Lustre mount is to a real cluster.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from rljob_nodeagent import AgentPool, claim_dir
from rljob_nodeagent.agent import DEFAULT_SHAPE, ExtraEnv

from . import binaries, chart, cluster, images, kind, onkind
from .operator_process import OperatorProcess
from .scenario import PLACEHOLDER_IMAGE

Say = Callable[[str], None]
# What `up` raises when the host cannot run the stack; its message says what is missing.
START_ERRORS = (binaries.BinariesError, cluster.ClusterError, images.ImageError, kind.KindError)
CHART = Path(__file__).resolve().parents[2] / "charts" / "rljob-operator"


class Stack(Protocol):
    """A cluster whose nodes run the gang's pods, and rljob's operator on it."""

    name: str
    nodes: tuple[str, ...]  # where gangs run
    trainer_image: str | None  # None: the job's own (node agents run this venv's trainer)
    urgent_image: str  # what a preempting pod runs: an image every node holds

    @property
    def kubeconfig(self) -> Path: ...

    def exists(self) -> bool:
        """Whether a cluster of this name is up (left by an earlier run, or up() ran)."""
        ...

    def up(self, say: Say) -> Path:
        """The control plane and the nodes, with the images they run; the kubeconfig."""
        ...

    def start_operator(self, namespace: str, say: Say) -> None:
        """rljob's operator, watching `namespace`, once it runs."""
        ...

    def claim_volume(self, volume: str, namespace: str, claim: str) -> tuple[Path, dict]:
        """A fresh host folder every node sees, and the PersistentVolume `volume` on it,
        reserved for the claim: (the folder as this machine sees it, the volume's manifest)."""
        ...

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """kubectl against the cluster; its output (stdout and stderr when check is False)."""
        ...

    def pod_log(self, namespace: str, pod: str) -> str:
        """A pod's log so far; "" when there is none to read."""
        ...

    def operator_log(self, tail: int = -1) -> str: ...

    def logs(self) -> str:
        """Where a user looks after a run (one line)."""
        ...

    def stop(self) -> str:
        """Stop what runs on this machine outside the cluster and keep the logs a user reads
        afterwards; the cluster stays. One line saying what was done."""
        ...

    def down(self, say: Say) -> None:
        """Remove the cluster and everything stop() leaves."""
        ...


def shared_folder_volume(name: str, host_path: str, namespace: str, claim: str) -> dict:
    """A ReadWriteMany hostPath PersistentVolume at `host_path` (as the nodes see it),
    reserved for one claim."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": host_path, "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }


def _fresh_folder(folder: Path) -> Path:
    """Made writable for the trainer image's non-root user; a node would make a missing one
    root-owned."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)
    return folder


class AgentStack:
    """Node agents (stand-in kubelets that run each pod's command as a local process, threads
    of this process) and the operator as a local process, which reads the claim's folder
    in-process. `make demo`'s, on a control plane of its own; the node-agent e2e tests', one
    stack per test on the lane's control plane (`control_plane`: its name in
    rljob_testenv.cluster), whose nodes carry the test's `labels` and come as the test asks
    for them (`add_agents`). Quick to start; docs/nodeagent.md says what it fakes."""

    trainer_image: str | None = None
    urgent_image = PLACEHOLDER_IMAGE  # a node agent runs no image

    def __init__(
        self,
        name: str,
        out: Path,
        claim: str,
        gpus_per_node: int,
        nodes: int = 2,
        *,
        control_plane: str | None = None,
        labels: dict[str, str] | None = None,
    ):
        self.name, self.out, self.claim, self.gpus = name, out, claim, gpus_per_node
        self.cluster = control_plane or name
        self.labels = labels
        self.nodes: tuple[str, ...] = tuple(f"{name}-node-{i}" for i in range(nodes))
        self.root = out / "nodeagent"  # the agents' pod folders, claims and logs
        self.pools: list[AgentPool] = []
        self.operator: OperatorProcess | None = None
        self._log: logging.Handler | None = None

    @property
    def own_control_plane(self) -> bool:
        return self.cluster == self.name

    @property
    def kubeconfig(self) -> Path:
        return cluster.kubeconfig_path(self.cluster)

    def exists(self) -> bool:
        return cluster.exists(self.cluster)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return cluster.kubectl(self.cluster, *args, input=input, check=check)

    def up(self, say: Say) -> Path:
        """A control plane of its own, where it has none, and the agents of its nodes, whose
        own log goes to nodeagent/nodeagent.log."""
        if self.own_control_plane:
            binaries.install(say=say)
            cluster.up(self.name, gpu_nodes=0, say=say)
            self._log_to_a_file()
        if self.nodes:  # a demo's; a test's stack gets its nodes later (add_agents)
            self._start_agents(list(self.nodes), self.gpus, None)
            say(f"node agents up: {', '.join(self.nodes)} ({self.gpus} GPUs each; pods run as "
                f"local processes, logs in {self.root / 'logs'})")  # fmt: skip
        return self.kubeconfig

    def _log_to_a_file(self) -> None:
        """The agents' own log (INFO and up) in nodeagent/nodeagent.log, not on the console."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._log = logging.FileHandler(self.root / "nodeagent.log")
        self._log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger = logging.getLogger("rljob_nodeagent")
        logger.addHandler(self._log)
        logger.setLevel(logging.INFO)
        logger.propagate = False

    def add_agents(self, count: int, gpus: int = 1, extra_env: ExtraEnv | None = None) -> AgentPool:
        """`count` more nodes of `gpus` GPUs each, Ready when this returns; `extra_env` adds
        to each pod's environment as its agent starts it (a test's hook)."""
        prefix = f"{self.name}-{uuid.uuid4().hex[:4]}"
        pool = self._start_agents([f"{prefix}-{i}" for i in range(count)], gpus, extra_env)
        self.nodes += tuple(pool.nodes)
        return pool

    def _start_agents(self, nodes: list[str], gpus: int, extra_env: ExtraEnv | None) -> AgentPool:
        pool = AgentPool(self.kubeconfig, self.root, nodes, replace(DEFAULT_SHAPE, gpus=gpus),
                         labels=self.labels, extra_env=extra_env, heartbeat_seconds=5)  # fmt: skip
        self.pools.append(pool)
        return pool.start()

    def start_operator(self, namespace: str, say: Say) -> None:
        """The CRDs too, on a control plane of its own (a shared one has them)."""
        if self.own_control_plane:
            cluster.install_crds(self.name, CHART.parents[1] / "crds")
        folder = claim_dir(self.root, namespace, self.claim)
        self.operator = OperatorProcess(
            self.kubeconfig, namespace, self.out / "operator.log",
            RLJOB_CHECKPOINT_VOLUMES=f"{self.claim}={folder}",
        )  # fmt: skip
        self.operator.start()
        say(f"operator up (log: {self.out / 'operator.log'})")

    def claim_volume(self, volume: str, namespace: str, claim: str) -> tuple[Path, dict]:
        """The agents map a claim to a folder of their own by its namespace and name; the
        volume's path is never read."""
        folder = _fresh_folder(claim_dir(self.root, namespace, claim))
        return folder, shared_folder_volume(volume, str(folder), namespace, claim)

    def live_processes(self) -> list[int]:
        """The processes of the agents' pods that still run."""
        return sorted(pid for pool in self.pools for pid in pool.live_processes())

    def pod_log(self, namespace: str, pod: str) -> str:
        """The agent's log file of the pod, which outlives the pod."""
        try:
            return (self.root / "logs" / namespace / f"{pod}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def operator_log(self, tail: int = -1) -> str:
        try:
            lines = (self.out / "operator.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[max(len(lines) - tail, 0) :] if tail >= 0 else lines)

    def logs(self) -> str:
        return f"{self.out} (operator.log, nodeagent/logs/, reference.log)"

    def stop(self) -> str:
        """The operator and the agents run here: they stop (the agents end their pods'
        processes and delete their nodes), whatever is kept."""
        if self.operator is not None:
            self.operator.stop()
        for pool in self.pools:
            pool.stop()
        if self._log is not None:
            logger = logging.getLogger("rljob_nodeagent")
            logger.removeHandler(self._log)
            logger.propagate = True
            self._log.close()
            self._log = None
        return f"operator and node agents stopped, {len(self.live_processes())} pod processes left"

    def down(self, say: Say) -> None:
        self.stop()
        if self.own_control_plane:
            cluster.down(self.name, say=say)


class KindStack:
    """tests/e2e/kind's: a kind cluster of a control plane and workers on rootful podman, every
    node starting with the project's images (kind.node_stores) and mounting one host folder
    (kind's extraMounts) at kind.SHARED_MOUNT; with `gpus_per_node`, the test device plugin's
    GPUs on the workers; `more_images` on every node besides the operator's and the
    trainer's. With `out` (the demo's, which makes its cluster anew), the shared folder (the
    checkpoints) and the logs stop() keeps are there, and outlive the cluster."""

    trainer_image = images.TRAINER.tag
    urgent_image = images.PAUSE_IMAGE  # on every node (kind.node_stores), and it keeps running

    def __init__(
        self,
        name: str,
        repo: Path,
        workers: int = 2,
        gpus_per_node: int = 0,
        out: Path | None = None,
        more_images: tuple[images.ImageBuild, ...] = (),
    ):
        self.name, self.repo, self.gpus, self.out = name, repo, gpus_per_node, out
        self.more_images = more_images
        self.nodes = tuple(kind.node_names(name, workers)[1])
        # A new cluster mounts this; one left running (RLJOB_KIND_CLUSTER) keeps its own.
        self.shared = (
            out / "shared" if out else kind.shared_dir(name) or kind.cluster_dir(name) / "shared"
        )

    @property
    def kubeconfig(self) -> Path:
        return kind.kubeconfig_path(self.name)

    def exists(self) -> bool:
        return kind.cluster_exists(self.name)

    def up(self, say: Say) -> Path:
        kubeconfig = onkind.up(self.name, self.shared, self.repo, len(self.nodes), say,
                               self.more_images)  # fmt: skip
        for node in self.nodes:
            self._advertise_gpus(node)
        return kubeconfig

    def _advertise_gpus(self, node: str) -> None:
        """With `gpus_per_node`, the test device plugin (devtools/rljob_gpuplugin) in the
        worker: that many nvidia.com/gpu, no GPU behind them."""
        if not self.gpus or self._gpus_of(node) == self.gpus:
            return
        kind.node_start_program(node, binaries.require(binaries.GPU_PLUGIN.name),
                                f"--devices={self.gpus}")  # fmt: skip
        cluster.wait_until(
            lambda: self._gpus_of(node) == self.gpus, 60, f"{node} to advertise GPUs"
        )

    def _gpus_of(self, node: str) -> int:
        gpus = r"jsonpath={.status.allocatable.nvidia\.com/gpu}"
        shown = self.kubectl("get", "node", node, "-o", gpus, check=False)
        return int(shown) if shown.strip().isdigit() else 0

    def power_off(self, node: str) -> None:
        """Stop a node as a power cut would: its kubelet, its runtime and its pods at once."""
        kind.node_power_off(node)

    def power_on(self, node: str) -> None:
        """The node's container starts again: systemd, containerd and the kubelet come back;
        the device plugin is started again once it is Ready."""
        kind.node_power_on(node)
        ready = r"jsonpath={.status.conditions[?(@.type=='Ready')].status}"

        def registered_and_ready() -> bool:  # a deleted Node comes back when its kubelet does
            return self.kubectl("get", "node", node, "-o", ready, check=False) == "True"

        cluster.wait_until(registered_and_ready, 180, f"{node} to be Ready again")
        self._advertise_gpus(node)

    def claim_volume(self, volume: str, namespace: str, claim: str) -> tuple[Path, dict]:
        folder = _fresh_folder(self.shared / "volumes" / volume)
        path = f"{kind.SHARED_MOUNT}/{folder.relative_to(self.shared)}"
        return folder, shared_folder_volume(volume, path, namespace, claim)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        shown = kind.kubectl(self.name, *args, check=check, stdin=input)
        return shown.stdout if check else shown.stdout + shown.stderr

    def down(self, say: Say) -> None:
        kind.delete_cluster(self.name, say=say)

    def start_operator(self, namespace: str, say: Say) -> None:
        say(f"helm install charts/rljob-operator (image {images.OPERATOR.tag})")
        chart.install_chart(self.kubeconfig, CHART, [namespace])
        say(f"operator running in {chart.OPERATOR_NAMESPACE}, installed by its chart")

    def pod_log(self, namespace: str, pod: str) -> str:
        """The container's log as the kubelet keeps it; "" once the pod is gone."""
        return self.kubectl("logs", "-n", namespace, pod, check=False)

    def operator_log(self, tail: int = -1) -> str:
        return self.kubectl("logs", "-n", chart.OPERATOR_NAMESPACE,
                            f"deploy/{chart.OPERATOR_DEPLOYMENT}", f"--tail={tail}",
                            check=False)  # fmt: skip

    def logs(self) -> str:
        return f"{self.out} (operator.log, pods/, reference.log)"

    def stop(self) -> str:
        """Keep the operator's and the pods' logs (of every namespace but the system's) in
        `out` before the nodes go."""
        if self.out is None or not self.exists():
            return "nothing to keep"
        (self.out / "operator.log").write_text(self.operator_log())
        pods = self.out / "pods"
        pods.mkdir(exist_ok=True)
        every = "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}"
        listed = self.kubectl("get", "pods", "-A", "-o", every, check=False)
        for entry in listed.split():
            namespace, pod = entry.split("/", 1)
            if not namespace.startswith("kube-"):
                (pods / f"{pod}.log").write_text(self.pod_log(namespace, pod))
        return "operator and pod logs saved"
