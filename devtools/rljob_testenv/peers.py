"""The operators benchmarks/peers.py compares rljob with, run as local processes on a test cluster.

JobSet's manager and Kubeflow's training-operator are built from source at pinned versions
(`binaries.PEER_COMPONENTS`); their CRDs and webhook configurations come from the same Go
modules, out of the module cache. Both serve admission webhooks. The API server is local, so
each webhook configuration points at `https://127.0.0.1:PORT`, served with a certificate for
127.0.0.1 signed by a CA made here. Neither runs leader election, and neither serves metrics.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from . import binaries, pki
from .ports import free_port
from .processes import kill_all

JOBSET, TRAINING_OPERATOR = binaries.PEER_COMPONENTS
# training-operator keeps its serving certificate here, whatever it is told (v1.9.4).
TRAINING_OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
TRAINING_OPERATOR_SECRET = "training-operator-webhook-cert"
TRAINING_OPERATOR_WEBHOOKS = "validator.training-operator.kubeflow.org"
TRAINING_OPERATOR_CA = "training-operator-ca"  # its rotator checks the CA by this DNS name


class PeerError(RuntimeError):
    """A peer could not be set up or did not become ready; the message says why."""


def local_webhooks(
    configuration: dict[str, Any], name: str, port: int, ca: bytes, resources: set[str]
) -> dict[str, Any]:
    """The upstream webhook configuration with every hook for `resources` pointed at this host."""
    hooks = []
    for hook in configuration["webhooks"]:
        hooked = {r for rule in hook["rules"] for r in rule["resources"]}
        if not hooked & resources:
            continue
        path = hook["clientConfig"]["service"]["path"]
        client_config = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": _b64(ca)}
        hooks.append(dict(hook, clientConfig=client_config))
    return dict(configuration, metadata={"name": name}, webhooks=hooks)


def select_pods(hooks: list[dict[str, Any]], selector: dict[str, Any]) -> None:
    """Send only the pods that match `selector` through the configurations' pod webhooks."""
    for configuration in hooks:
        for hook in configuration["webhooks"]:
            if any("pods" in rule["resources"] for rule in hook["rules"]):
                hook["objectSelector"] = selector


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class PeerProcess:
    """One peer controller: its CRD and webhooks applied, its process started and ready."""

    name = ""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig, self.workdir = kubeconfig, workdir / self.name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.webhook_port, self.health_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "controller.log"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        cmd = [str(binaries.require("kubectl")), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise PeerError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        documents = yaml.safe_dump_all(objects)
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=documents)

    def wait_established(self, crd: str) -> None:
        """Until the API server serves the CRD (`kubectl wait` fails on one without status)."""
        deadline = time.monotonic() + 60
        while not any(
            cond["type"] == "Established" and cond["status"] == "True"
            for cond in json.loads(self.kubectl("get", "crd", crd, "-o", "json"))
            .get("status", {})
            .get("conditions")
            or []
        ):
            if time.monotonic() > deadline:
                raise PeerError(f"the CRD {crd} was not established in 60 s")
            time.sleep(0.2)

    def certificate(
        self, dns: tuple[str, ...] = (), ca_dns: tuple[str, ...] = ()
    ) -> tuple[bytes, Path]:
        """A CA and a serving certificate for 127.0.0.1 (and `dns`): (CA PEM, folder)."""
        folder = self.workdir / "pki"
        pki.create_ca(folder, f"{self.name}-ca", dns=ca_dns)
        pki.issue(folder, "tls", f"/CN={self.name}-webhook", ips=("127.0.0.1",), dns=dns,
                  server=True)  # fmt: skip
        return (folder / "ca.crt").read_bytes(), folder

    def manager_config(self, api_version: str, certs: Path, **extra: Any) -> Path:
        """A controller-runtime manager's Configuration, written to a file: one replica, its
        webhooks served with our certificate on 127.0.0.1, no metrics. Its path."""
        config = {
            "apiVersion": api_version,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            **extra,
        }
        path = self.workdir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, KUBECONFIG=str(self.kubeconfig), **(env or {})),
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PeerError(f"{self.name} exited at start:\n{self.log_tail()}")
            if self._ready() and self._webhook_serves():
                return
            time.sleep(0.5)
        self.stop()
        raise PeerError(f"{self.name} was not ready in 90 s:\n{self.log_tail()}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2):
                return True
        except OSError:
            return False

    def _webhook_serves(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(1)
            return sock.connect_ex(("127.0.0.1", self.webhook_port)) == 0

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            kill_all([self.proc.pid])


class JobSetController(PeerProcess):
    """JobSet's manager, with its internal certificate management off (the CA is ours)."""

    name = "jobset"

    def up(self) -> None:
        source = binaries.module_source(JOBSET)
        crd = yaml.safe_load(
            (source / "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml").read_text()
        )
        ca, certs = self.certificate()
        webhooks = list(
            yaml.safe_load_all((source / "config/components/webhook/manifests.yaml").read_text())
        )
        hooks = [
            local_webhooks(w, f"jobset-{w['kind'].lower()}", self.webhook_port, ca,
                           {"jobsets", "pods"})
            for w in webhooks if w
        ]  # fmt: skip
        # As upstream's kustomize patch: only the pods of JobSets.
        owned = {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}
        select_pods(hooks, {"matchExpressions": [owned]})
        self.apply(crd)
        self.wait_established("jobsets.jobset.x-k8s.io")
        config = self.manager_config("config.jobset.x-k8s.io/v1alpha1", certs)
        self.start([str(binaries.require("jobset-manager")), "--config", str(config)])
        self.apply(*hooks)


class TrainingOperator(PeerProcess):
    """Kubeflow's training-operator with PyTorchJob only.

    Its certificate rotator keeps the certificate it finds in its Secret while the CA names
    `training-operator-ca` and the certificate its Service's DNS name, so the Secret is made
    here with those names and 127.0.0.1 in the certificate. In a pod the kubelet would mount
    that Secret at the rotator's folder; here the files are written there.
    """

    name = "training-operator"

    def __init__(self, kubeconfig: Path, workdir: Path, namespace: str) -> None:
        super().__init__(kubeconfig, workdir)
        self.namespace = namespace

    def up(self) -> None:
        source = binaries.module_source(TRAINING_OPERATOR)
        crd = yaml.safe_load(
            (source / "manifests/base/crds/kubeflow.org_pytorchjobs.yaml").read_text()
        )
        ca, certs = self.certificate(
            dns=(f"training-operator.{self.namespace}.svc",), ca_dns=(TRAINING_OPERATOR_CA,)
        )
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": TRAINING_OPERATOR_SECRET, "namespace": self.namespace},
            "data": {
                "ca.crt": _b64(ca),
                "ca.key": _b64(pki.pkcs1_key(certs / "ca.key")),
                "tls.crt": _b64((certs / "tls.crt").read_bytes()),
                "tls.key": _b64((certs / "tls.key").read_bytes()),
            },
        }
        upstream = yaml.safe_load((source / "manifests/base/webhook/manifests.yaml").read_text())
        hooks = local_webhooks(
            upstream, TRAINING_OPERATOR_WEBHOOKS, self.webhook_port, ca, {"pytorchjobs"}
        )
        self.apply(crd, secret, hooks)
        self.wait_established("pytorchjobs.kubeflow.org")
        shutil.rmtree(TRAINING_OPERATOR_CERT_DIR, ignore_errors=True)
        TRAINING_OPERATOR_CERT_DIR.mkdir(parents=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, TRAINING_OPERATOR_CERT_DIR / name)
        self.start(
            [
                str(binaries.require("training-operator")),
                "--enable-scheme=pytorchjob",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                f"--webhook-server-port={self.webhook_port}",
            ],
            env={"MY_POD_NAMESPACE": self.namespace},
        )
