"""Kueue on a test cluster: its manager as a local process, with pod integration on.

Built from source at a pinned version (`binaries.KUEUE`, or any other release:
`start(..., version=...)`, `binaries.KUEUE_VERSIONS` are the ones tested); its CRDs and
webhook configurations come from the same Go module, out of the module cache. The webhooks point
at `https://127.0.0.1:PORT`, served with a certificate signed by a CA made here (the API
server is local), as for the peers. Only pods that name a queue go through its pod
webhooks, so that a stopped Kueue never blocks the other tests' pods. No leader election,
no metrics.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from rljob_operator.constants import KUEUE_QUEUE_LABEL

from . import binaries
from .peers import PeerProcess, local_webhooks, select_pods

# Without its internal certificate management, Kueue (v0.17.0, v0.19.2) reads a metrics
# certificate from this fixed folder, and exits without one (even with metrics off).
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# The webhooks of the kinds the tests use: pods (gated until admitted) and Kueue's own.
HOOKED = {"pods", "workloads", "clusterqueues", "localqueues", "resourceflavors", "cohorts"}
# Its visibility API server would want certificates of its own at a fixed path, so it is off;
# PriorityBoost (alpha in v0.17 and in v0.19) adds the Workload's kueue.x-k8s.io/priority-boost
# annotation to its priority, for rljob's spec.queueing.priorityBoost. A Workload without the
# annotation is ordered as with the gate off.
FEATURE_GATES = {"VisibilityOnDemand": False, "PriorityBoost": True}


class Kueue(PeerProcess):
    """Kueue's manager with the `pod` integration (pod groups) and nothing else."""

    name = "kueue"

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        feature_gates: dict[str, bool] | None = None,
        version: str = binaries.KUEUE_VERSION,
        wait_for_pods_ready: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(kubeconfig, workdir)
        self.hooks: list[tuple[str, str]] = []  # (kind, name) of its webhook configurations
        self.feature_gates = {**FEATURE_GATES, **(feature_gates or {})}
        self.component = binaries.kueue_component(version)
        self.version = version
        # The Configuration's waitForPodsReady, written only where given: without it v0.17
        # leaves WaitForPodsReady off, and v0.19 turns it on with its defaults (a timeout of
        # 30 min, the recovery timeout the same).
        self.wait_for_pods_ready = wait_for_pods_ready

    def up(self) -> None:
        source = binaries.module_source(self.component)
        bases = sorted((source / "config/components/crd/bases").glob("*.yaml"))
        crds = [yaml.safe_load(path.read_text()) for path in bases]
        ca, certs = self.certificate()
        upstream = yaml.safe_load_all(
            (source / "config/components/webhook/manifests.yaml").read_text()
        )
        hooks = [
            local_webhooks(w, f"kueue-{w['kind'].lower()}", self.webhook_port, ca, HOOKED)
            for w in upstream if w
        ]  # fmt: skip
        select_pods(hooks, {"matchExpressions": [{"key": KUEUE_QUEUE_LABEL, "operator": "Exists"}]})
        self.apply(*crds)
        for crd in crds:
            self.wait_established(crd["metadata"]["name"])
        extra: dict[str, Any] = {"integrations": {"frameworks": ["pod"]}}
        if self.wait_for_pods_ready is not None:
            extra["waitForPodsReady"] = self.wait_for_pods_ready
        config = self.manager_config("config.kueue.x-k8s.io/v1beta2", certs, **extra)
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, METRICS_CERT_DIR / name)
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))
        manager = binaries.ensure(self.component, "kueue-manager")
        self.start([str(manager), "--config", str(config), f"--feature-gates={gates}"])
        self.apply(*hooks)
        self.hooks = [(h["kind"].lower(), h["metadata"]["name"]) for h in hooks]

    def down(self) -> None:
        """Its webhooks first (a hook without its server fails every pod it matches), then it."""
        for kind, name in self.hooks:
            self.kubectl("delete", kind, name, "--ignore-not-found")
        self.stop()


def start(
    kubeconfig: Path,
    workdir: Path,
    feature_gates: dict[str, bool] | None = None,
    version: str = binaries.KUEUE_VERSION,
    wait_for_pods_ready: dict[str, Any] | None = None,
) -> Kueue:
    """Kueue at `version`, built if needed, running against the cluster; `down()` it when
    done. `feature_gates` override FEATURE_GATES; `wait_for_pods_ready` is the Configuration's
    waitForPodsReady (e.g. `{"timeout": "10s"}`), left to the version's default if None."""
    kueue = Kueue(kubeconfig, workdir, feature_gates, version, wait_for_pods_ready)
    binaries.ensure(kueue.component, "kueue-manager")
    kueue.up()
    return kueue
