"""What a cluster with real nodes needs to run rljob as a user would: the nodes running this
repository's images, and the operator installed by its Helm chart with the image built from
the Dockerfile (on kind's nodes too). rljob_testenv.stacks puts them together.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import yaml

from . import binaries, cluster, images

OPERATOR_NAMESPACE = "rljob-system"
RELEASE = "rljob"
OPERATOR_DEPLOYMENT = "rljob-operator"


def up(name: str, nodes: int, gpus_per_node: int, repo: Path, say=print) -> Path:
    """A control plane with `nodes` real nodes (no kwok nodes) that hold the pause, operator and
    trainer images, each built from `repo` where what it copies changed; its kubeconfig."""
    binaries.install(say=say, real_nodes=True)
    archives = (
        images.pause_archive(say),
        images.build(images.OPERATOR, repo, say),
        images.build(images.TRAINER, repo, say),
    )
    real = cluster.RealNodes(nodes, gpus_per_node, archives)
    return cluster.up(name, gpu_nodes=0, say=say, real=real)


def helm(name: str, *args: str) -> str:
    """Run helm against the named cluster; raise ClusterError with its output on failure."""
    return helm_at(cluster.kubeconfig_path(name), *args)


def helm_at(kubeconfig: Path, *args: str) -> str:
    """helm against any cluster's kubeconfig (a kind cluster's too)."""
    cmd = [str(binaries.require("helm")), "--kubeconfig", str(kubeconfig), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise cluster.ClusterError(f"helm {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def install_operator(name: str, chart: Path, watch_namespaces: Iterable[str]) -> None:
    """`helm upgrade --install` of the chart into a namespace that enforces the "restricted" Pod
    Security Standard, with the operator image the real nodes imported; waits until it is Ready."""
    install_chart(cluster.kubeconfig_path(name), chart, watch_namespaces)


def install_chart(kubeconfig: Path, chart: Path, watch_namespaces: Iterable[str]) -> None:
    """install_operator() on any cluster whose nodes hold the operator image (kind's too)."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": OPERATOR_NAMESPACE,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
        },
    }
    kubectl = [str(binaries.require("kubectl")), "--kubeconfig", str(kubeconfig)]
    applied = subprocess.run([*kubectl, "apply", "-f", "-"], input=yaml.safe_dump(namespace),
                             capture_output=True, text=True, check=False)  # fmt: skip
    if applied.returncode != 0:
        raise cluster.ClusterError(f"kubectl apply of {OPERATOR_NAMESPACE}: {applied.stderr}")
    repository, tag = images.OPERATOR.tag.rsplit(":", 1)
    helm_at(
        kubeconfig, "upgrade", "--install", RELEASE, str(chart), "--namespace", OPERATOR_NAMESPACE,
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",
        "--set", f"watchNamespaces={{{','.join(watch_namespaces)}}}",
        "--wait", "--timeout", "180s",
    )  # fmt: skip


def uninstall_operator(name: str) -> None:
    helm(name, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait")


def operator_log(name: str, tail: int = -1) -> str:
    """The chart operator's log, as `kubectl logs` gives it (empty if it cannot be read)."""
    return cluster.kubectl(
        name, "logs", "-n", OPERATOR_NAMESPACE, f"deploy/{OPERATOR_DEPLOYMENT}", f"--tail={tail}",
        check=False,
    )  # fmt: skip
