"""How long the checkpoint request takes on a real kubelet: the annotation to the file.

rljob asks a trainer to save now by annotating its pod; a downward-API volume turns the
annotation into the file the trainer polls. The kubelet rewrites that file only when it
syncs the pod, so the delay is the kubelet's, not rljob's. This measures it on a kind
cluster's kubelet: a pod (the operator image, which kind's nodes hold) polls the file every
50 ms and prints when it changes; the script annotates it N times and prints the delays
(median, p90, max). Each value is a request as the operator writes it, each with a sooner
deadline than the last: all but the first are a request written again to a pod asked already
(docs/recovery.md, "When the deadline moves earlier"), which the operator leaves undeleted for
pod_cleanup.REQUEST_LANDS_SECONDS after the write. Then the pod is deleted with a grace period
(its PID 1 ignores SIGTERM, so it stays Terminating) and annotated once more: the script says
whether the file changes within --terminating-wait seconds (the kubelet's volume manager skips
terminating pods, so rljob asks no pod being deleted).

    .venv/bin/rljob testenv kind up --name bench --workers 1
    .venv/bin/rljob testenv kind load --name bench ~/.cache/rljob/images/rljob-operator-dev-*.tar
    .venv/bin/python benchmarks/checkpoint_request_latency.py --cluster bench --samples 10
    .venv/bin/rljob testenv kind down --name bench
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

from kubernetes import client, config
from rljob_contract import CHECKPOINT_REQUEST_ANNOTATION
from rljob_contract.request import format_request
from rljob_testenv import images, kind

POLLER = """
import sys, time
path, last = '/podinfo/request', None
while True:
    try:
        value = open(path).read()
    except OSError:
        value = None
    if value != last:
        print(f'{time.time():.3f} {value!r}', flush=True)
        last = value
    time.sleep(0.05)
"""


def poller_pod(name: str) -> dict:
    field = f"metadata.annotations['{CHECKPOINT_REQUEST_ANNOTATION}']"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 120,  # PID 1 ignores SIGTERM: stays Terminating
            "containers": [{
                "name": "poll", "image": images.OPERATOR.tag,
                "imagePullPolicy": "Never", "command": ["python", "-c", POLLER],
                "volumeMounts": [{"name": "podinfo", "mountPath": "/podinfo"}],
            }],
            "volumes": [{"name": "podinfo", "downwardAPI": {"items": [{
                "path": "request", "fieldRef": {"fieldPath": field},
            }]}}],
        },
    }  # fmt: skip


def annotate(core: client.CoreV1Api, name: str, value: str) -> float:
    """Write the request; when it was sent (this host's clock, which kind's nodes share)."""
    patch = {"metadata": {"annotations": {CHECKPOINT_REQUEST_ANNOTATION: value}}}
    sent = time.time()
    core.patch_namespaced_pod(name, "default", patch)
    return sent


def seen_at(core: client.CoreV1Api, name: str, value: str, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in core.read_namespaced_pod_log(name, "default").splitlines():
            stamp, _, shown = line.partition(" ")
            if value in shown:
                return float(stamp)
        time.sleep(0.2)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", required=True, help="a kind cluster made here")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument(
        "--terminating-wait", type=float, default=20,
        help="seconds to watch the file of a pod being deleted (0: skip)",
    )  # fmt: skip
    args = parser.parse_args()
    config.load_kube_config(config_file=str(kind.kubeconfig_path(args.cluster)))
    core = client.CoreV1Api()
    name = f"latency-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod("default", poller_pod(name))
    try:
        while core.read_namespaced_pod(name, "default").status.phase != "Running":
            time.sleep(0.5)
        delays = []
        goes = datetime.now(UTC) + timedelta(hours=1)
        for i in range(args.samples):
            value = format_request(datetime.now(UTC), goes - timedelta(seconds=i))  # sooner each
            sent = annotate(core, name, value)
            seen = seen_at(core, name, value, args.timeout)
            delay = (seen - sent) if seen else float("inf")
            delays.append(delay)
            print(f"request {i}: the file changed {delay:.2f} s after the annotation", flush=True)
        if args.terminating_wait > 0:
            core.delete_namespaced_pod(name, "default")  # its grace period: it stays Terminating
            value = format_request(datetime.now(UTC), goes - timedelta(seconds=args.samples))
            sent = annotate(core, name, value)
            seen = seen_at(core, name, value, args.terminating_wait)
            print("a pod being deleted: " + (f"the file changed {seen - sent:.2f} s after the "
                  "annotation" if seen else f"the file did not change within "
                  f"{args.terminating_wait:g} s"), flush=True)  # fmt: skip
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    finite = sorted(d for d in delays if d != float("inf"))
    print(
        f"checkpoint request latency over {len(delays)} requests: "
        f"median {statistics.median(delays):.2f} s, "
        f"p90 {finite[int(0.9 * (len(finite) - 1))]:.2f} s, max {max(delays):.2f} s "
        f"({len(delays) - len(finite)} not seen within {args.timeout:.0f} s)"
    )


if __name__ == "__main__":
    main()
