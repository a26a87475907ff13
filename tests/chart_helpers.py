"""Helm and the chart's ServiceAccount for cluster tests of charts/rljob-operator."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import yaml
from rljob_testenv import binaries, cluster

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "rljob-operator"
CHART_CRDS = CHART / "crds"
CI_VALUES = CHART / "ci"


def helm(cluster_name: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run helm (against the named cluster, when there is one); fail with its output."""
    cmd = [str(binaries.require("helm")), *args]
    if cluster_name:
        cmd += ["--kubeconfig", str(cluster.kubeconfig_path(cluster_name))]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def kubectl(
    cluster_name: str, *args: str, input: str | None = None, kubeconfig: Path | None = None
):
    """kubectl without raising: the test looks at the exit status and the output itself."""
    config = kubeconfig or cluster.kubeconfig_path(cluster_name)
    cmd = [str(binaries.require("kubectl")), "--kubeconfig", str(config), *args]
    return subprocess.run(cmd, input=input, capture_output=True, text=True, check=False)


def render(
    *args: str, namespace: str = "rljob-system", release: str = "rljob"
) -> list[dict[str, Any]]:
    """`helm template` of the chart, parsed."""
    out = helm(None, "template", release, str(CHART), "--namespace", namespace, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(manifests: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, got {len(matches)}"
    return matches[0]


def installed_manifests(cluster_name: str, release: str, namespace: str) -> list[dict[str, Any]]:
    out = helm(cluster_name, "get", "manifest", release, "--namespace", namespace).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def service_account_kubeconfig(cluster_name: str, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount itself, with a token the API server
    issued for it: the holder has exactly the account's RBAC, as the operator's pod would.

    (Impersonation would not do: neither kopf nor the kubernetes Python client reads `as:`
    from a kubeconfig, so the operator would silently run with the admin's rights.)
    """
    token = cluster.kubectl(
        cluster_name, "create", "token", account, "--namespace", namespace, "--duration", "1h"
    ).strip()
    admin = yaml.safe_load(cluster.kubeconfig_path(cluster_name).read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "test", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def operator_command(
    manifests: list[dict[str, Any]], liveness_port: int
) -> tuple[list[str], dict[str, str]]:
    """The flags and environment the chart gives the operator's container, for a local process:
    the health endpoint moves to a free local port and the metrics port is the test's own."""
    container = find(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "operator", args
    flags = []
    for arg in args[1:]:
        if arg.startswith("--metrics-port="):
            continue
        if arg.startswith("--liveness="):
            arg = f"--liveness=http://127.0.0.1:{liveness_port}/healthz"
        flags.append(arg)
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return flags, env


def file_digests(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under root: its sha256 and modification time."""
    return {
        str(path.relative_to(root)): (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            path.stat().st_mtime_ns,
        )
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


# The Prometheus Operator's ServiceMonitor kind, reduced to what a server-side dry run of the
# chart needs (the test cluster has no Prometheus Operator): the group, version and kind, with
# a schema that takes any fields. The rendered ServiceMonitor's fields are checked by the test.
SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
