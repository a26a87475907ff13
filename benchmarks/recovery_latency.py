"""Operator-side recovery latency on the local control plane.

For each of N recoveries: evict one pod of a running gang (2 nodes, or --nnodes) through the
Eviction API, and measure from the eviction request to the moment the operator
recorded the new gang's creation (status.recoveries[-1].gangCreatedAt), to the new
pods' creation on the API server, and to both new pods Running. Three variants:

- local: the operator reads the checkpoint volume itself (RLJOB_CHECKPOINT_VOLUMES), and
  the gang is scheduled all or nothing through the Workload API (a PodGroup per attempt);
- local, pod by pod: the same with `gangScheduling: Off`;
- inspector: it runs an inspector pod; this script plays the kubelet and completes
  the inspector the moment it appears (its own polling adds up to ~50 ms).

kwok plays the kubelet for the trainer pods, so this is the operator's and the
control plane's share of a recovery, not a real node's: no image pull, no
container start, no trainer start-up, no checkpoint load.

    .venv/bin/python benchmarks/recovery_latency.py [--recoveries 20] [--nnodes 2] [--cluster NAME]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from kubernetes import client, config  # noqa: E402
from rljob_contract.manifest import write_manifest  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.api.timestamps import unix_seconds  # noqa: E402
from rljob_testenv import binaries, cluster  # noqa: E402
from rljob_testenv.operator_process import OperatorProcess  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} p95 {percentile(values, 0.95):.3f}"


def seed_checkpoint(volume: Path) -> None:
    folder = volume / "run" / "global_step_10"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "__0_0.distcp").write_bytes(b"w" * 1024)
    (folder / "actor" / ".metadata").write_bytes(b"m" * 64)
    write_manifest(folder, step=10, world_size=2)


def job_manifest(
    name: str,
    nodes: list[str] | None = None,
    directory: str = "run",
    gang: str = "Auto",
    nnodes: int = 2,
) -> dict:
    """A benchmark job of `nnodes` pods resuming from `directory` of the claim `ckpts`; on
    `nodes` only, when given."""
    template_spec: dict = {"terminationGracePeriodSeconds": 0}
    if nodes:
        on_nodes = {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
        required = {"nodeSelectorTerms": [{"matchExpressions": [on_nodes]}]}
        template_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {
            "image": "rljob-trainer:bench",
            "nnodes": nnodes,
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "checkpoint": {
                "volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                "directory": directory,
            },
            "template": {"spec": template_spec},
            "gangScheduling": gang,
        },
    }


class Bench:
    def __init__(self, kubeconfig: Path, namespace: str, nnodes: int = 2) -> None:
        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.nnodes = nnodes

    def job(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
        )

    def gang(self, name: str, attempt: int) -> list:
        selector = (
            f"{c.LABEL_JOB}={name},{c.LABEL_ATTEMPT}={attempt},{c.LABEL_ROLE}={c.ROLE_TRAINER}"
        )
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def complete_inspector(self, name: str, attempt: int) -> None:
        path = "/checkpoints/run/global_step_10"
        report = {"found": True, "step": 10, "path": path, "layout": "rljob", "verify": "quick",
                  "rejected": [], "progress_step": 12}  # fmt: skip
        status = {"status": {"phase": "Succeeded", "containerStatuses": [{
            "name": "inspector", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "message": json.dumps(report)}}}]}}  # fmt: skip
        self.core.patch_namespaced_pod_status(f"{name}-inspect-a{attempt}", self.namespace, status)

    def wait(
        self, what: str, fetch, timeout: float = 60.0, inspector: tuple[str, int] | None = None
    ):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if inspector:
                try:
                    self.complete_inspector(*inspector)
                    inspector = None
                except client.ApiException:
                    pass
            value = fetch()
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"timed out waiting for {what}")

    def one_recovery(self, name: str, attempt: int, use_inspector: bool) -> tuple[float, ...]:
        pods = self.wait("the gang to run", lambda: [
            p for p in self.gang(name, attempt) if p.status.phase == "Running"
        ] if len(self.gang(name, attempt)) == self.nnodes else None)  # fmt: skip
        victim = pods[0].metadata.name
        started = time.time()
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=victim, namespace=self.namespace)
        )
        self.core.create_namespaced_pod_eviction(victim, self.namespace, body)
        new = attempt + 1
        inspector = (name, new) if use_inspector else None
        seen: dict[str, float] = {}

        def done() -> bool:
            gang = self.gang(name, new)
            if "pods" not in seen and len(gang) == self.nnodes:
                seen["pods"] = time.time()
            if len(gang) == self.nnodes and all(p.status.phase == "Running" for p in gang):
                seen.setdefault("running", time.time())
            last = (self.job(name)["status"].get("recoveries") or [{}])[-1]
            if last.get("attempt") == new and last.get("gangCreatedAt"):
                seen["recorded"] = unix_seconds(last["gangCreatedAt"])
            return len(seen) == 3

        self.wait("the new gang", done, inspector=inspector)
        return tuple(seen[k] - started for k in ("recorded", "pods", "running"))


def claim_manifests(namespace: str) -> list[dict]:
    """A PVC `ckpts` bound to a PV, so that the gang's pods can be scheduled."""
    pv = f"ckpts-{namespace}"
    modes = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                **modes,
                "capacity": {"storage": "1Gi"},
                "hostPath": {"path": f"/tmp/{pv}"},
                "claimRef": {"namespace": namespace, "name": "ckpts"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "ckpts", "namespace": namespace},
            "spec": {**modes, "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}},
        },
    ]


def run_variant(
    bench: Bench, kubeconfig: Path, nodes: list[str], count: int, use_inspector: bool, gang: str
):
    namespace = bench.namespace
    with tempfile.TemporaryDirectory() as tmp:
        volume = Path(tmp) / "volume"
        seed_checkpoint(volume)
        env = {} if use_inspector else {"RLJOB_CHECKPOINT_VOLUMES": f"ckpts={volume}"}
        operator = OperatorProcess(kubeconfig, namespace, Path(tmp) / "operator.log", **env)
        operator.start()
        name = "bench-inspector" if use_inspector else f"bench-local-{gang.lower()}"
        try:
            bench.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL,
                job_manifest(name, nodes, gang=gang, nnodes=bench.nnodes),
            )  # fmt: skip
            if use_inspector:
                bench.wait(
                    "the first gang", lambda: len(bench.gang(name, 0)) == bench.nnodes,
                    inspector=(name, 0),
                )  # fmt: skip
            results = [bench.one_recovery(name, attempt, use_inspector) for attempt in range(count)]
        finally:
            bench.custom.delete_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, name
            )
            time.sleep(2)  # let the operator release the pods before it stops
            operator.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recoveries", type=int, default=20)
    parser.add_argument("--nnodes", type=int, default=2, help="pods per gang")
    parser.add_argument("--cluster", help="use this running `rljob testenv` cluster")
    args = parser.parse_args()
    binaries.install(say=lambda m: print(m, file=sys.stderr))
    name = args.cluster or f"bench-{uuid.uuid4().hex[:6]}"
    kubeconfig = cluster.up(name, gpu_nodes=0, say=lambda m: print(m, file=sys.stderr))
    try:
        cluster.install_crds(name, REPO / "crds")
        nodes = cluster.add_gpu_nodes(name, args.nnodes + 1, prefix=f"bench{uuid.uuid4().hex[:4]}")
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        cluster.kubectl(name, "create", "namespace", namespace)
        claim = {"apiVersion": "v1", "kind": "List", "items": claim_manifests(namespace)}
        cluster.kubectl(name, "apply", "-f", "-", input=json.dumps(claim))
        bench = Bench(kubeconfig, namespace, args.nnodes)
        print(f"{args.recoveries} recoveries per variant, gangs of {args.nnodes} pods; seconds "
              "from the eviction request")  # fmt: skip
        print(f"{'variant':<22} {'to gangCreatedAt':>28} {'new pods seen':>28} "
              f"{'new gang Running':>28}")  # fmt: skip
        variants = (("local", False, "Auto"), ("local, pod by pod", False, "Off"),
                    ("inspector", True, "Auto"))  # fmt: skip
        for label, use_inspector, gang in variants:
            results = run_variant(bench, kubeconfig, nodes, args.recoveries, use_inspector, gang)
            columns = (summary([r[i] for r in results]) for i in range(3))
            print(f"{label:<22} " + " ".join(f"{column:>28}" for column in columns))
        cluster.kubectl(name, "delete", "pv", f"ckpts-{namespace}", "--wait=false")
    finally:
        if not args.cluster:
            cluster.down(name, say=lambda m: print(m, file=sys.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
