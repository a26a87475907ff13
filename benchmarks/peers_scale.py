"""rljob against JobSet under a burst: one pod of each of 100 of 1,000 gangs evicted at once.

Both systems, and the floor (benchmarks/floor.py: a bare controller that does only what any
recovery must), run the same number of 2-pod gangs on the same kwok nodes of one local
control plane, one system after the other. The cluster's kwok stages end pods as a kubelet does (a
deleted pod turns Failed with exit 143, then goes; see `rljob_testenv.stages`), which JobSet's
preemption recipe needs. Per system it prints the time until every gang runs, then evicts one
pod of each of --burst gangs at once and times, per gang, the eviction request → the whole gang
fresh (both pods created after its eviction) and Running, from a watch on the pods.

The machine's cores are all busy during a burst, so what a recovery costs sets how fast the
burst goes: per system it also prints, per recovery, the API server's requests from all
clients and the CPU seconds of each process (the control plane's, rljob's operator, JobSet's
manager, and this benchmark's own pod watch, in which the floor's controller runs), each less
what as long a time at rest costs.

PyTorchJob is left out: it never restarts a whole gang (see benchmarks/peers.py).

    .venv/bin/python benchmarks/peers_scale.py [--jobs 1000] [--nodes 250] [--burst 100]
        [--only floor rljob] [--gang-scheduling Off]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import peers  # noqa: E402
from bench_cluster import (  # noqa: E402
    apiserver_requests,
    control_plane_pids,
    cpu_seconds,
)
from floor import FloorController  # noqa: E402
from kube_steps import bind_claim, wait_for  # noqa: E402
from kubernetes import client, config  # noqa: E402
from recovery_latency import seed_checkpoint  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.api.timestamps import parse_iso  # noqa: E402
from rljob_testenv import binaries, cluster  # noqa: E402
from rljob_testenv.operator_process import OperatorProcess  # noqa: E402
from rljob_testenv.peers import JobSetController  # noqa: E402

KWOK_NODES = {"type": "kwok"}
FRESH_TIMEOUT = 600.0
SETTLE = 20.0  # seconds for the system to finish what its gangs' start asked of it
IDLE_WINDOW = 10.0  # seconds of the cluster at rest, measured before each burst


@dataclass
class Usage:
    """The cluster's work so far: the API server's requests from all clients and each
    process's CPU seconds."""

    at: float
    requests: Counter[str]
    cpu: dict[str, float]

    @classmethod
    def now(cls, cluster_name: str, processes: dict[str, int]) -> Usage:
        return cls(time.monotonic(), apiserver_requests(cluster_name), cpu_seconds(processes))


def burst_cost(idle: tuple[Usage, Usage], burst: tuple[Usage, Usage], recoveries: int) -> str:
    """What one recovery cost the cluster: the burst's requests and CPU seconds, less what
    the same length of time at rest costs, divided by the recoveries."""
    rest_seconds, seconds = idle[1].at - idle[0].at, burst[1].at - burst[0].at
    scale = seconds / rest_seconds

    def per_recovery(during: float, at_rest: float) -> float:
        """Never below 0: what the burst asked for less a noisy rest can come out negative."""
        return max(0.0, during - at_rest * scale) / recoveries

    calls = burst[1].requests - burst[0].requests
    rest_calls = idle[1].requests - idle[0].requests
    top = sorted(((per_recovery(n, rest_calls[k]), k) for k, n in calls.items()), reverse=True)
    total = sum(n for n, _ in top)
    cpu = {name: per_recovery(burst[1].cpu[name] - burst[0].cpu[name],
                              idle[1].cpu[name] - idle[0].cpu[name])
           for name in burst[0].cpu}  # fmt: skip
    return (
        f"  per recovery, all clients: {total:.1f} API requests ("
        + ", ".join(f"{n:.1f} {k}" for n, k in top if n >= 0.5)
        + f"); CPU seconds {sum(cpu.values()):.2f} ("
        + ", ".join(f"{name} {v:.3f}" for name, v in sorted(cpu.items(), key=lambda i: -i[1]))
        + ")"
    )


class Burst:
    def __init__(self, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str):
        self.core, self.custom, self.namespace = core, custom, namespace
        self.pods = peers.PodWatch(core, namespace)
        self.pods.start()
        self.evicted_at: dict[str, float] = {}  # gang -> its last eviction request (Unix time)

    def create(self, systems: list[peers.System]) -> float:
        """Create every gang; seconds until all of them run."""
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: s.create(self.custom, self.namespace), systems))
        wait_for(
            lambda: all(len(self.pods.running(s)) == 2 for s in systems),
            timeout=1800,
            what="every gang to run",
        )
        return time.monotonic() - started

    def evict(self, systems: list[peers.System]) -> list[float | None]:
        """One pod of each gang at once; per gang, seconds to the whole gang fresh and Running."""
        victims = [(s, s.victim([{"name": p.name, "labels": p.labels}
                                 for p in self.pods.running(s)])) for s in systems]  # fmt: skip

        def evict_one(victim: tuple[peers.System, str]) -> float:
            pod, started = victim[1], time.time()
            body = client.V1Eviction(
                metadata=client.V1ObjectMeta(name=pod, namespace=self.namespace)
            )
            self.core.create_namespaced_pod_eviction(pod, self.namespace, body)
            return started

        with ThreadPoolExecutor(16) as pool:
            evicted = list(zip(systems, pool.map(evict_one, victims), strict=True))
        self.evicted_at = {s.gang: at for s, at in evicted}
        fresh: dict[str, float] = {}
        deadline = time.monotonic() + FRESH_TIMEOUT
        while len(fresh) < len(systems) and time.monotonic() < deadline:
            for system, at in evicted:
                ran = sorted(p.running_at for p in self.pods.running(system) if p.seen_at >= at)
                if system.gang not in fresh and len(ran) == 2:
                    fresh[system.gang] = ran[1] - at
            time.sleep(0.1)
        return [fresh.get(s.gang) for s in systems]

    def delete(self, systems: list[peers.System]) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: s.delete(self.custom, self.namespace), systems))
        wait_for(
            lambda: (
                not self.core.list_namespaced_pod(
                    self.namespace, label_selector=peers.BENCH_LABEL, limit=1
                ).items
            ),
            timeout=1800,
            what="the gangs' pods to go",
        )


def run(args: argparse.Namespace, kubeconfig: Path, work: Path, name: str) -> None:
    configuration = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    api = client.ApiClient(configuration)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"burst-{uuid.uuid4().hex[:6]}"
    cluster.kubectl(name, "create", "namespace", namespace)
    pv = bind_claim(core, namespace)
    volume = work / "volume"
    seed_checkpoint(volume)
    operator = OperatorProcess(kubeconfig, namespace, work / "rljob-operator.log",
                               RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}")  # fmt: skip
    jobset = JobSetController(kubeconfig, work)
    floor = FloorController(api, namespace, f"{peers.BENCH_LABEL}=floor")
    operator.start()
    jobset.up()
    floor.start()
    burst = Burst(core, custom, namespace)
    processes = {**control_plane_pids(name), "rljob operator": operator.proc.pid,
                 "jobset manager": jobset.proc.pid,
                 "benchmark (its pod watch, the floor)": os.getpid()}  # fmt: skip
    results = {}
    print(f"{args.jobs} gangs of 2 pods on {args.nodes} kwok nodes (kubelet-like stages); seconds "
          "from each eviction request (one run)", flush=True)  # fmt: skip
    try:
        every = {"rljob": partial(peers.rljob_system, gang_scheduling=args.gang_scheduling),
                 "jobset": peers.jobset_system,
                 "floor": partial(peers.floor_system, floor)}  # fmt: skip
        makers = [every[name] for name in args.only or every]  # the last one's gangs stay
        for index, make in enumerate(makers):
            systems = [make(f"g{i:04d}", KWOK_NODES) for i in range(args.jobs)]
            label = systems[0].name
            peers.say(f"{label}: creating {args.jobs} gangs")
            took = burst.create(systems)
            peers.say(f"{label}: all {args.jobs} gangs Running after {took:.0f}s; at rest")
            time.sleep(SETTLE)
            rest = Usage.now(name, processes)
            time.sleep(IDLE_WINDOW)
            idle = (rest, Usage.now(name, processes))
            peers.say(f"{label}: evicting")
            fresh = burst.evict(systems[: args.burst])
            results[label] = fresh
            report(label, args.jobs, took, fresh)
            print(burst_cost(idle, (idle[1], Usage.now(name, processes)), args.burst), flush=True)
            if label == "rljob":
                print_rljob_stages(custom, namespace, burst.evicted_at)
            if index < len(makers) - 1:  # the last system's gangs go with the cluster
                peers.say(f"{label}: deleting")
                burst.delete(systems)
    finally:
        floor.stop()
        jobset.stop()
        operator.stop()
        core.delete_persistent_volume(pv)
        if args.cluster:  # a cluster of the user's: its namespace goes, in the background
            cluster.kubectl(name, "delete", "namespace", namespace, "--wait=false")
    done = {k: [f for f in v if f is not None] for k, v in results.items()}
    if "rljob" in done and "jobset" in done:
        ratio = statistics.median(done["jobset"]) / statistics.median(done["rljob"])
        print(f"\nrljob p50 vs JobSet p50: {ratio:.1f}x")
    if "rljob" in done and "floor" in done:
        print(f"rljob over the floor: {peers.over_floor(done['rljob'], done['floor'])}")


def print_rljob_stages(custom: client.CustomObjectsApi, namespace: str, evicted_at: dict) -> None:
    """Where rljob's recoveries spent their time, from each job's status.recoveries."""
    stages: dict[str, list[float]] = {"detectedAt": [], "gangCreatedAt": [], "firstRunningAt": []}
    for gang, at in evicted_at.items():
        job = custom.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, gang)
        record = ((job.get("status") or {}).get("recoveries") or [{}])[-1]
        for stage, values in stages.items():
            if record.get(stage):
                values.append(parse_iso(record[stage]).timestamp() - at)
    for stage, values in stages.items():
        print(f"  rljob's own {stage:<15} {peers.describe(values)}", flush=True)


def report(label: str, jobs: int, took: float, fresh: list[float | None]) -> None:
    done = [f for f in fresh if f is not None]
    missed = len(fresh) - len(done)
    tail = f"  ({missed} not fresh after {FRESH_TIMEOUT:.0f}s)" if missed else ""
    print(f"{label:<8} all {jobs} Running after {took:.0f}s; {len(fresh)} evicted at once, "
          f"whole gang fresh and Running: {peers.describe(done)}{tail}", flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--cluster", help="cluster name (started with kubelet-like stages)")
    parser.add_argument("--only", nargs="+", choices=("rljob", "jobset", "floor"),
                        help="these systems alone, in this order")  # fmt: skip
    parser.add_argument("--gang-scheduling", choices=("Auto", "Off"), default="Auto",
                        help="rljob's spec.gangScheduling (Off: pod by pod)")  # fmt: skip
    args = parser.parse_args()
    binaries.install(say=peers.say, peers=True)
    name = args.cluster or f"burst-{uuid.uuid4().hex[:6]}"
    kubeconfig = cluster.up(name, gpu_nodes=args.nodes, say=peers.say, kubelet_like_pods=True)
    try:
        cluster.install_crds(name, REPO / "crds")
        with tempfile.TemporaryDirectory(prefix="rljob-burst-") as tmp:
            run(args, kubeconfig, Path(tmp), name)
    finally:
        if not args.cluster:
            cluster.down(name, say=peers.say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
