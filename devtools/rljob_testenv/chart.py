"""rljob's operator on a cluster as a user installs it: its Helm chart, with the image built
from the Dockerfile, which the cluster's nodes already hold (kind's, rljob_testenv.stacks)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import yaml

from . import binaries, cluster, images

OPERATOR_NAMESPACE = "rljob-system"
RELEASE = "rljob"
OPERATOR_DEPLOYMENT = "rljob-operator"


def helm_at(kubeconfig: Path, *args: str) -> str:
    """helm against a cluster's kubeconfig; ClusterError with its output on failure."""
    cmd = [str(binaries.require("helm")), "--kubeconfig", str(kubeconfig), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise cluster.ClusterError(f"helm {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def install_chart(kubeconfig: Path, chart: Path, watch_namespaces: Iterable[str]) -> None:
    """`helm upgrade --install` of the chart into a namespace that enforces the "restricted" Pod
    Security Standard, with the operator image the nodes hold; waits until it is Ready."""
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
