"""The operator at scale: 1,000 two-pod jobs on 250 kwok nodes, on the local control plane.

It prints:
- the time from the first create until every job is Running;
- the operator's RSS and CPU at steady state (from /proc, over --window seconds);
- the API requests per second the operator causes while nothing changes: the API server's
  own `apiserver_request_total` over a window with the operator running, less the same
  window with the operator stopped (SIGSTOP; its watches stay open, it sends nothing);
- a burst: one pod of each of --burst jobs evicted at once; per job, from its eviction to
  the whole new gang created, and to the whole new gang Running (p50, p95, max; seen by
  this script's own pod watch);
- the same burst with two replicas (kopf peering), the acting one SIGKILLed right after
  the evictions: the takeover time (the kill to the other replica's "resuming" line), the
  latencies, and whether any job got more than one new gang.

kwok plays every kubelet: pods are Running once bound, and an evicted pod goes at once
(grace 0). So this measures the operator and the control plane, not real nodes.

    .venv/bin/python benchmarks/scale.py [--jobs 1000] [--nodes 250] [--burst 100]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import yaml  # noqa: E402
from bench_cluster import apiserver_requests, process_cpu_seconds  # noqa: E402
from kube_steps import bind_claim  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402
from recovery_latency import job_manifest, percentile  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.api.reasons import Phase  # noqa: E402
from rljob_testenv import binaries, cluster  # noqa: E402
from rljob_testenv.operator_process import OperatorProcess  # noqa: E402

NAMESPACE = "scale"
PEERING_CRD = REPO / "charts" / "rljob-operator" / "crds" / "kopf.dev_kopfpeerings.yaml"
PEERING = "rljob-scale"
RESUMING = re.compile(r"^(\S+ \S+) INFO rljob_operator\.controller: resuming", re.M)


def spread(values: list[float]) -> str:
    return (
        f"p50 {statistics.median(values):.2f}s  p95 {percentile(values, 0.95):.2f}s  "
        f"max {max(values):.2f}s  (n={len(values)})"
    )


class PodTimes:
    """This script's own watch of the namespace's pods: when each was first seen, and first
    seen Running (local clock)."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.added: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.uids: dict[str, set[str]] = {}  # every pod of that name ever seen: one uid each
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            try:
                stream = watch.Watch().stream(
                    self.core.list_namespaced_pod, NAMESPACE, timeout_seconds=3600
                )
                for event in stream:
                    pod, now = event["object"], time.time()
                    name = pod.metadata.name
                    self.uids.setdefault(name, set()).add(pod.metadata.uid)
                    self.added.setdefault(name, now)
                    if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                        self.running.setdefault(name, now)
            except Exception:  # reconnect
                time.sleep(0.5)


class Bench:
    def __init__(self, name: str, kubeconfig: Path) -> None:
        self.name, self.kubeconfig = name, kubeconfig
        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        configuration.connection_pool_maxsize = 32
        api = client.ApiClient(configuration)
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.pods = PodTimes(self.core)
        self.tmp = Path(tempfile.mkdtemp(prefix="rljob-scale-"))

    def operator(self, label: str, *args: str) -> OperatorProcess:
        process = OperatorProcess(
            self.kubeconfig, NAMESPACE, self.tmp / f"{label}.log",
            args=list(args) or None, RLJOB_CHECKPOINT_VOLUMES=f"ckpts={self.tmp / 'volume'}",
        )  # fmt: skip
        process.start()
        return process

    def jobs(self) -> list[dict]:
        listed = self.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, NAMESPACE, c.PLURAL)
        return listed["items"]

    def wait_running(self, count: int, attempt_of: dict[str, int], timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [
                j for j in self.jobs()
                if (j.get("status") or {}).get("phase") == Phase.RUNNING
                and j["status"].get("attempt", 0) == attempt_of.get(j["metadata"]["name"], 0)
            ]  # fmt: skip
            if len(running) >= count:
                return time.time()
            time.sleep(2)
        raise TimeoutError(f"not all {count} jobs Running within {timeout:.0f}s")

    def requests(self) -> Counter[str]:
        return apiserver_requests(self.name)

    def requests_total(self) -> float:
        return sum(self.requests().values())

    def evict(self, pods: list[str]) -> dict[str, float]:
        def one(pod: str) -> tuple[str, float]:
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=NAMESPACE))
            self.core.create_namespaced_pod_eviction(pod, NAMESPACE, body)
            return pod, time.time()

        with ThreadPoolExecutor(16) as pool:
            return dict(pool.map(one, pods))

    def gang_times(self, job: str, attempt: int) -> tuple[float | None, float | None]:
        names = [f"{job}-a{attempt}-n{rank}" for rank in range(2)]
        added = [self.pods.added.get(n) for n in names]
        running = [self.pods.running.get(n) for n in names]
        return (
            max(added) if all(added) else None,  # type: ignore[type-var]
            max(running) if all(running) else None,  # type: ignore[type-var]
        )

    def burst(self, jobs: list[str], timeout: float = 300) -> tuple[list[float], list[float]]:
        """Evict pod n0 of attempt 0 of each job at once; per job, eviction to the whole new
        gang created and to it Running."""
        evicted = self.evict([f"{job}-a0-n0" for job in jobs])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            times = {job: self.gang_times(job, 1) for job in jobs}
            if all(running for _, running in times.values()):
                break
            time.sleep(0.5)
        else:
            missing = [j for j, (_, running) in times.items() if not running]
            raise TimeoutError(f"{len(missing)} jobs had no new gang running, e.g. {missing[:3]}")
        created = [times[j][0] - evicted[f"{j}-a0-n0"] for j in jobs]
        running = [times[j][1] - evicted[f"{j}-a0-n0"] for j in jobs]
        return created, running


def process_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def log_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--window", type=float, default=60, help="seconds per idle window")
    parser.add_argument("--cluster", default="scale")
    parser.add_argument("--skip-replicas", action="store_true", help="no two-replica burst")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    if args.burst * (1 if args.skip_replicas else 2) > args.jobs:
        parser.error("--burst jobs are evicted once per phase: need more --jobs")

    binaries.install(say=lambda m: None)
    if cluster.exists(args.cluster):
        cluster.down(args.cluster, say=lambda m: None)
    kubeconfig = cluster.up(args.cluster, gpu_nodes=0, say=print)
    try:
        return run(args, kubeconfig)
    finally:
        if not args.keep:
            cluster.down(args.cluster, say=lambda m: None)


def run(args: argparse.Namespace, kubeconfig: Path) -> int:
    name = args.cluster
    gpus = -(-2 * args.jobs // args.nodes)  # every pod asks for one GPU
    cluster.add_gpu_nodes(name, args.nodes, cluster.NodeShape(gpus=gpus), prefix="scale")
    for path in (REPO / "crds", PEERING_CRD):
        cluster.install_crds(name, path)
    cluster.kubectl(name, "create", "namespace", NAMESPACE)
    bench = Bench(name, kubeconfig)
    bind_claim(bench.core, NAMESPACE)
    names = [f"job-{i:04d}" for i in range(args.jobs)]
    print(f"{args.jobs} jobs x 2 pods on {args.nodes} kwok nodes ({gpus} GPUs each)", flush=True)

    operator = bench.operator("single")
    started = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: bench.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, NAMESPACE, c.PLURAL,
            job_manifest(n, directory=f"runs/{n}")), names))  # fmt: skip
    created = time.time()
    all_running = bench.wait_running(args.jobs, {}, timeout=1800)
    print(f"created {args.jobs} jobs in {created - started:.1f}s; all Running "
          f"{all_running - started:.1f}s after the first create", flush=True)  # fmt: skip

    time.sleep(min(30.0, args.window))  # the last events of the start settle
    pid = operator.proc.pid
    cpu_before, requests_before, at = process_cpu_seconds(pid), bench.requests_total(), time.time()
    time.sleep(args.window)
    elapsed = time.time() - at
    busy = (process_cpu_seconds(pid) - cpu_before) / elapsed
    with_operator = (bench.requests_total() - requests_before) / elapsed
    rss = process_rss_mb(pid)
    os.kill(pid, signal.SIGSTOP)
    requests_before, at = bench.requests_total(), time.time()
    time.sleep(args.window)
    without = (bench.requests_total() - requests_before) / (time.time() - at)
    os.kill(pid, signal.SIGCONT)
    print(f"steady state: RSS {rss:.0f} MB, CPU {100 * busy:.1f}% of a core; API requests "
          f"{with_operator:.2f}/s with the operator, {without:.2f}/s with it stopped: "
          f"{with_operator - without:.2f}/s caused by the operator", flush=True)  # fmt: skip

    first = names[: args.burst]
    before, cpu_before, at = bench.requests(), process_cpu_seconds(pid), time.time()
    made, running = bench.burst(first)
    cpu = (process_cpu_seconds(pid) - cpu_before) / (time.time() - at)
    calls = bench.requests() - before
    print(f"burst, 1 replica: {args.burst} pods of {args.burst} jobs evicted at once", flush=True)
    print(f"  eviction -> whole new gang created: {spread(made)}")
    print(f"  eviction -> whole new gang Running: {spread(running)}")
    print(f"  operator CPU during the burst {100 * cpu:.0f}% of a core; API requests per "
          f"recovered job (all clients): {calls.total() / args.burst:.1f}, the most: "
          + ", ".join(f"{what} {n / args.burst:.1f}" for what, n in calls.most_common(8)),
          flush=True)  # fmt: skip
    operator.stop()
    if args.skip_replicas:
        return 0

    cluster.kubectl(name, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
        "metadata": {"name": PEERING, "namespace": NAMESPACE}}))  # fmt: skip
    replicas = ["--namespace", NAMESPACE, "--peering", PEERING, "--peering-lifetime", "10"]
    acting = bench.operator("replica-a", *replicas, "--priority", "20")
    time.sleep(3)
    waiting = bench.operator("replica-b", *replicas, "--priority", "10")
    deadline = time.monotonic() + 60
    while not RESUMING.search(acting.log()) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(5)  # both keep-alives written: the waiting one has seen the acting one
    second = names[args.burst : 2 * args.burst]
    killer = threading.Timer(0.5, acting.kill)
    killer.start()
    killed = time.time() + 0.5
    made, running = bench.burst(second, timeout=600)
    resumed = RESUMING.search(waiting.log())
    takeover = log_time(resumed.group(1)) - killed if resumed else float("nan")
    attempts = {j["metadata"]["name"]: j["status"].get("attempt") for j in bench.jobs()}
    twice = [j for j in second if attempts.get(j) != 1]
    duplicates = [p for p, uids in bench.pods.uids.items() if len(uids) > 1]
    print(f"burst, 2 replicas, the acting one SIGKILLed 0.5 s after the evictions began "
          f"(peering lifetime 10 s): takeover {takeover:.1f}s", flush=True)  # fmt: skip
    print(f"  eviction -> whole new gang created: {spread(made)}")
    print(f"  eviction -> whole new gang Running: {spread(running)}")
    print(f"  jobs with more than one new gang: {len(twice)}; pods created twice: "
          f"{len(duplicates)}", flush=True)  # fmt: skip
    waiting.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
