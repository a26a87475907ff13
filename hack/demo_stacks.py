"""The two clusters `make demo` runs its job on, with their operator: what hack/demo.py starts
and stops, apart from what it shows. The real nodes' set-up is the tests' own
(rljob_testenv.onrealnodes.up).

Each has the same members: `nodes`, `trainer_image` (None: the one the job names),
`urgent_image` (what the demo's preemptor runs), `up` (the control plane and the nodes; its
kubeconfig), `start` (the operator; the host folder behind the checkpoint claim), `pod_log`
(a pod's log so far: the verl demo reads verl's step metrics there), `logs` (where to look)
and `stop` (what start started; a line saying what was left).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rljob_nodeagent import claim_dir, live_processes, spawn
from rljob_testenv import binaries, cluster, images, nodeconfig, onrealnodes
from rljob_testenv.operator_process import OperatorProcess
from rljob_testenv.scenario import PLACEHOLDER_IMAGE


class AgentStack:
    """`make demo`'s: two node agents (devtools/rljob_nodeagent, stand-in kubelets that run each
    pod's command as a local process) and the operator as a local process, which reads the
    claim's folder in-process. Quick to start; docs/nodeagent.md says what it fakes."""

    nodes = ("demo-node-0", "demo-node-1")
    trainer_image: str | None = None  # the node agent runs the trainer from this venv

    def __init__(self, out: Path, namespace: str, claim: str, gpus_per_node: int) -> None:
        self.out, self.namespace, self.claim, self.gpus = out, namespace, claim, gpus_per_node
        self.root = out / "nodeagent"  # the agents' pod folders, claims and logs
        self.agents: Any = None
        self.operator: OperatorProcess | None = None

    def up(self, name: str, say: Callable[[str], None]) -> Path:
        binaries.install(say=say)
        return cluster.up(name, gpu_nodes=0, say=say)

    def start(self, kubeconfig: Path, name: str, say: Callable[[str], None]) -> Path:
        """Start the nodes and the operator; return the host folder behind the claim."""
        self.agents = spawn(kubeconfig, list(self.nodes), self.root, gpus=self.gpus)
        say(
            f"node agents up: {', '.join(self.nodes)} ({self.gpus} GPUs each; pods run as "
            f"local processes, logs in {self.root / 'logs'})"
        )
        folder = claim_dir(self.root, self.namespace, self.claim)
        self.start_operator(kubeconfig, folder)
        say(f"operator up (log: {self.out / 'operator.log'})")
        return folder

    def start_operator(self, kubeconfig: Path, folder: Path) -> None:
        self.operator = OperatorProcess(
            kubeconfig, self.namespace, self.out / "operator.log",
            RLJOB_CHECKPOINT_VOLUMES=f"{self.claim}={folder}",
        )  # fmt: skip
        self.operator.start()

    urgent_image = PLACEHOLDER_IMAGE  # a node agent runs no image

    def pod_log(self, name: str, namespace: str, pod: str) -> str:
        """The agent's log file of the pod, which outlives the pod; "" before it starts."""
        try:
            return (self.root / "logs" / namespace / f"{pod}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def logs(self) -> str:
        return f"{self.out} (operator.log, nodeagent/logs/, reference.log)"

    def stop(self, name: str) -> str:
        """Stop what start started; say what was left."""
        if self.agents is not None:
            self.agents.stop()
        if self.operator is not None:
            self.operator.stop()
        left = [p for node in self.nodes for p in live_processes(node)]
        return f"operator and node agents stopped, {len(left)} pod processes left"


class RealNodeStack:
    """`make demo-real`'s: two real nodes (a kubelet and a containerd each, see docs/testenv.md)
    running the trainer image in containers, and the operator installed by its Helm chart,
    which finds resume targets through its inspector pod. The images are built with buildah
    on first use (the trainer's takes about 8 minutes: torch from PyPI)."""

    nodes = ("real-node-0", "real-node-1")
    trainer_image = images.TRAINER.tag

    def __init__(
        self, out: Path, namespace: str, claim: str, gpus_per_node: int, repo: Path
    ) -> None:
        self.out, self.namespace, self.claim, self.gpus = out, namespace, claim, gpus_per_node
        self.repo = repo
        self.chart = repo / "charts" / "rljob-operator"

    def up(self, name: str, say: Callable[[str], None]) -> Path:
        return onrealnodes.up(name, len(self.nodes), self.gpus, self.repo, say)

    def start(self, kubeconfig: Path, name: str, say: Callable[[str], None]) -> Path:
        say(f"real nodes up: {', '.join(self.nodes)} ({self.gpus} GPUs each)")
        say(f"helm install {self.chart.relative_to(self.repo)} (image {images.OPERATOR.tag})")
        onrealnodes.install_operator(name, self.chart, [self.namespace])
        say(f"operator running in {onrealnodes.OPERATOR_NAMESPACE}, installed by its chart")
        return self.out / "checkpoints-volume"

    urgent_image = nodeconfig.PAUSE_IMAGE  # on every node: the urgent pod really runs

    def pod_log(self, name: str, namespace: str, pod: str) -> str:
        """The kubelet's log of the pod's container; "" once the pod is gone."""
        return cluster.kubectl(name, "logs", "-n", namespace, pod, check=False)

    def logs(self) -> str:
        return f"{self.out} (operator.log, pods/, reference.log)"

    def stop(self, name: str) -> str:
        """Keep the operator's and the last gang's logs before the nodes go."""
        if not cluster.exists(name):
            return "no cluster was started"
        (self.out / "operator.log").write_text(onrealnodes.operator_log(name))
        pods = self.out / "pods"
        pods.mkdir(exist_ok=True)
        listed = cluster.kubectl(
            name, "get", "pods", "-n", self.namespace, "-o", "name", check=False
        )
        for entry in listed.split():
            pod = entry.removeprefix("pod/")
            (pods / f"{pod}.log").write_text(self.pod_log(name, self.namespace, pod))
        return "operator and pod logs saved"
