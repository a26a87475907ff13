"""rljob against JobSet and Kubeflow's PyTorchJob: one pod of a 2-pod gang evicted, in one run.

Each system runs one 2-pod gang on two node agents of its own (kubelet-like: an evicted pod's
process gets SIGTERM, exits 143, its pod turns Failed and then goes, as on a kubelet). Round
after round, in an order that rotates, one pod of each gang is evicted through the Eviction
API, and the script measures, from a watch on the pods, the time from the eviction request
until the **whole** gang is fresh (two pods created after the eviction) and Running.

Every pod runs torchrun around a worker that sleeps (the node agents run it as a local
process), so that every system's pods take the same time to stop.

- rljob: an RLTrainingJob (`framework: custom`, `command: [sleep, infinity]`, which rljob runs
  under torchrun), its checkpoint claim read by the operator itself;
- JobSet, with the documented preemption recipe: the child Job's podFailurePolicy fails the
  Job on a DisruptionTarget condition, and a failure-policy rule
  RestartJobSetAndIgnoreMaxRestarts on reason PodFailurePolicy restarts the whole JobSet;
- PyTorchJob (training-operator), Master + Worker with restartPolicy OnFailure: it replaces
  the evicted pod only, and its survivor would sit in a broken collective. That is reported
  as "gang not restarted", with the time until the replacement ran;
- the floor (benchmarks/floor.py): a bare controller in this process that does only what any
  recovery must (see the end, delete the rest of the gang, create the new one once the old
  one has stopped), on plain pods.

With `--kwok` the gangs run on kwok nodes instead, whose stages end pods as a kubelet does (an
evicted pod turns Failed with exit 143 at once, then goes): nothing stops on SIGTERM, so the
recovery is the controllers' and the control plane's share alone.

Beside the whole recovery it prints the old gang's own stop (from the eviction until every
old pod has stopped or gone: SIGTERM, torchrun's exit) and the rest, which is the
controller's own share, and rljob's times over the floor's (p50, p95, max). It also prints
each recovery's CPU seconds in the control plane's processes and in each system's own
controller, from the eviction until the gang is whole again: on node agents the old gang's
torchrun exits on the same cores.

After the rounds (every gang has lived through one eviction per round) it reports whether
each job still runs: whether its preemptions stayed out of its failure budget.

With `--pod-by-pod` a second rljob job runs beside the first with `gangScheduling: Off`, its
pods scheduled one by one as the floor's are: what the all-or-nothing PodGroup costs.

    .venv/bin/python benchmarks/peers.py [--rounds 10] [--kwok] [--pod-by-pod] [--cluster NAME]

Builds JobSet and training-operator first if they are not cached (`rljob testenv install
--peers`, a few minutes once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from bench_cluster import (  # noqa: E402
    CONTROL_PLANE,
    bench_cluster,
    control_plane_pids,
    cpu_seconds,
    say,
)
from floor import RANK_LABEL, FloorController  # noqa: E402
from kube_steps import bind_claim, wait_for  # noqa: E402
from kubernetes import client, watch  # noqa: E402
from recovery_latency import percentile, seed_checkpoint  # noqa: E402
from rljob_nodeagent import AgentPool, claim_dir  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.api.reasons import Phase  # noqa: E402
from rljob_operator.api.timestamps import parse_iso  # noqa: E402
from rljob_testenv import binaries  # noqa: E402
from rljob_testenv.operator_process import OperatorProcess  # noqa: E402
from rljob_testenv.peers import JobSetController, TrainingOperator  # noqa: E402
from urllib3.exceptions import ProtocolError  # noqa: E402

BENCH_LABEL = "bench.rljob.io/system"
GANG_LABEL = "bench.rljob.io/gang"
POD_BY_POD = "rljob-pod-by-pod"  # the name of rljob's system with gangScheduling: Off
GRACE_SECONDS = 5  # every system's pods: the same terminationGracePeriodSeconds
NOT_RESTARTED_AFTER = 10.0  # seconds: a gang not fresh by then is reported as not restarted
# Each system's own controller, where it is a process of its own (the floor's is this one).
CONTROLLER = {"rljob": "rljob-operator", POD_BY_POD: "rljob-operator", "jobset": "jobset",
              "pytorchjob": "training-operator"}  # fmt: skip
KWOK_NODES = 10  # with --kwok: room for every system's gang (--pod-by-pod too), one node each pod


# What every pod runs: torchrun around a worker that sleeps, so that each system's pods take
# the same time to stop on SIGTERM (torchrun needs most of a second). rljob's own pods run
# torchrun with its rendezvous across the gang; the peers' run it standalone.
PEER_COMMAND = [
    *("torchrun", "--no-python", "--standalone", "--nproc-per-node", "1"),
    *("sleep", "infinity"),
]


def pod_spec(container: str, nodes: dict[str, str]) -> dict[str, Any]:
    """What every system's pods share: the nodes they run on, the same grace period."""
    return {
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "nodeSelector": nodes,
        "containers": [{"name": container, "image": "busybox", "command": PEER_COMMAND}],
    }


def pod_metadata(system: str, gang: str) -> dict[str, Any]:
    return {"labels": {BENCH_LABEL: system, GANG_LABEL: gang}}


@dataclass
class System:
    name: str
    gang: str  # the name of its one job
    group: str
    version: str
    plural: str
    manifest: dict[str, Any]
    victim: Callable[[list[dict[str, Any]]], str]  # which pod of the gang to evict
    standing: Callable[[dict[str, Any]], tuple[bool, str]]  # (still runs, what its status says)

    def create(self, custom: client.CustomObjectsApi, namespace: str) -> None:
        custom.create_namespaced_custom_object(
            self.group, self.version, namespace, self.plural, self.manifest
        )

    def delete(self, custom: client.CustomObjectsApi, namespace: str) -> None:
        custom.delete_namespaced_custom_object(
            self.group, self.version, namespace, self.plural, self.gang,
            body=client.V1DeleteOptions(propagation_policy="Background"),
        )  # fmt: skip

    def still_runs(self, custom: client.CustomObjectsApi, namespace: str) -> tuple[bool, str]:
        obj = custom.get_namespaced_custom_object(
            self.group, self.version, namespace, self.plural, self.gang
        )
        return self.standing(obj)


@dataclass
class FloorSystem(System):
    """The bare controller of benchmarks/floor.py: plain pods, no object of its own."""

    controller: FloorController | None = None

    def create(self, custom: client.CustomObjectsApi, namespace: str) -> None:
        assert self.controller is not None
        self.controller.add(self.gang, self.manifest, size=2)

    def delete(self, custom: client.CustomObjectsApi, namespace: str) -> None:
        assert self.controller is not None
        self.controller.remove(self.gang)

    def still_runs(self, custom: client.CustomObjectsApi, namespace: str) -> tuple[bool, str]:
        return True, "no budget to spend"


def floor_system(
    controller: FloorController, gang: str = "gang", nodes: dict[str, str] | None = None
) -> System:
    template = {
        "metadata": pod_metadata("floor", gang),
        "spec": {**pod_spec("trainer", nodes or {"pool": "floor"}), "restartPolicy": "Never"},
    }
    return FloorSystem(
        "floor", gang, "", "", "", template,
        lambda pods: next(p["name"] for p in pods if p["labels"].get(RANK_LABEL) == "1"),
        lambda _: (True, ""), controller,
    )  # fmt: skip


def rljob_system(
    gang: str = "gang",
    nodes: dict[str, str] | None = None,
    gang_scheduling: str = "Auto",
    name: str = "rljob",
    rendezvous_port: int = 29500,
) -> System:
    spec = {
        "framework": "custom",
        "gangScheduling": gang_scheduling,
        "rendezvousPort": rendezvous_port,
        "command": ["sleep", "infinity"],
        "image": "busybox",
        "nnodes": 2,
        "checkpoint": {
            "volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
            "directory": "run",
        },
        "template": {
            "metadata": pod_metadata(name, gang),
            "spec": {
                k: v
                for k, v in pod_spec("trainer", nodes or {"pool": name}).items()
                if k != "containers"
            },
        },
    }

    def standing(job: dict[str, Any]) -> tuple[bool, str]:
        status = job.get("status") or {}
        return status.get("phase") == Phase.RUNNING, (
            f"phase {status.get('phase')}, {status.get('preemptions')} preemptions, "
            f"{status.get('failures')} failures counted"
        )

    return System(
        name, gang, c.GROUP, c.VERSION, c.PLURAL,
        {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": gang}, "spec": spec},
        lambda pods: next(p["name"] for p in pods if p["labels"].get(c.LABEL_NODE_RANK) == "1"),
        standing,
    )  # fmt: skip


def rljob_pod_by_pod_system(gang: str = "gang", nodes: dict[str, str] | None = None) -> System:
    """rljob with `gangScheduling: Off`: its pods scheduled one by one, as the floor's are, so
    that the same run shows what the all-or-nothing PodGroup costs a recovery. Its rendezvous
    has a port of its own: on node agents every pod listens on this machine's 127.0.0.1, and
    with both on one port, the first run on node agents saw this job's gang never come up again
    in its fifth round."""
    return rljob_system(f"{gang}-{POD_BY_POD}", nodes, "Off", POD_BY_POD, rendezvous_port=29501)


def jobset_system(gang: str = "gang", nodes: dict[str, str] | None = None) -> System:
    job = {
        "parallelism": 2,
        "completions": 2,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        },
        "template": {
            "metadata": pod_metadata("jobset", gang),
            "spec": {**pod_spec("trainer", nodes or {"pool": "jobset"}), "restartPolicy": "Never"},
        },
    }
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": gang},
        "spec": {
            "failurePolicy": {
                "maxRestarts": 0,
                "rules": [
                    {
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job}}],
        },
    }

    def standing(jobset: dict[str, Any]) -> tuple[bool, str]:
        status = jobset.get("status") or {}
        ended = [x["type"] for x in status.get("conditions") or [] if x.get("status") == "True"
                 and x["type"] in ("Failed", "Completed")]  # fmt: skip
        return not ended, f"{', '.join(ended) or 'not ended'}, {status.get('restarts', 0)} restarts"

    return System(
        "jobset", gang, "jobset.x-k8s.io", "v1alpha2", "jobsets", manifest,
        lambda pods: next(p["name"] for p in pods
                          if p["labels"].get("batch.kubernetes.io/job-completion-index") == "1"),
        standing,
    )  # fmt: skip


def pytorchjob_system(gang: str = "gang", nodes: dict[str, str] | None = None) -> System:
    def replica(kind: str) -> dict[str, Any]:
        return {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": {"metadata": pod_metadata("pytorchjob", gang),
                         "spec": pod_spec("pytorch", nodes or {"pool": "pytorchjob"})},
        }  # fmt: skip

    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": gang},
        "spec": {"pytorchReplicaSpecs": {"Master": replica("Master"), "Worker": replica("Worker")}},
    }

    def standing(job: dict[str, Any]) -> tuple[bool, str]:
        conditions = [x for x in (job.get("status") or {}).get("conditions") or []
                      if x.get("status") == "True"]  # fmt: skip
        last = conditions[-1]["type"] if conditions else "none"
        return last in ("Running", "Restarting", "Created"), f"condition {last}"

    return System(
        "pytorchjob", gang, "kubeflow.org", "v1", "pytorchjobs", manifest,
        lambda pods: next(p["name"] for p in pods
                          if p["labels"].get("training.kubeflow.org/replica-type") == "worker"),
        standing,
    )  # fmt: skip


@dataclass
class PodSeen:
    name: str
    labels: dict[str, str]
    seen_at: float  # when the watch first showed it (this process's clock)
    phase: str = "Pending"
    running_at: float | None = None
    gone: bool = False
    stopped_at: float | None = None  # when it turned Succeeded or Failed, or went


@dataclass
class PodWatch:
    """Every benchmark pod of the namespace, from one watch: when each appeared and ran."""

    core: client.CoreV1Api
    namespace: str
    gangs: dict[tuple[str, str], dict[str, PodSeen]] = field(default_factory=dict)  # uid -> pod
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        """One watch, resumed from where it was each time the server ends it."""
        pod_watch = watch.Watch()
        while True:
            known = pod_watch.resource_version
            try:
                for event in pod_watch.stream(
                    self.core.list_namespaced_pod, self.namespace, label_selector=BENCH_LABEL,
                    timeout_seconds=300, **({"resource_version": known} if known else {}),
                ):  # fmt: skip
                    self._seen(event["type"], event["object"], time.time())
            except (ProtocolError, client.ApiException) as exc:
                if getattr(exc, "status", None) == 410:  # too old: list afresh
                    pod_watch.resource_version = None
                time.sleep(0.5)

    def _seen(self, event_type: str, pod: Any, now: float) -> None:
        with self.lock:
            labels = pod.metadata.labels
            gang = self.gangs.setdefault((labels[BENCH_LABEL], labels[GANG_LABEL]), {})
            seen = gang.setdefault(pod.metadata.uid, PodSeen(pod.metadata.name, dict(labels), now))
            seen.phase = pod.status.phase or "Pending"
            seen.gone = (
                event_type == "DELETED"
                or pod.metadata.deletion_timestamp is not None
                or seen.phase in ("Succeeded", "Failed")
            )
            if seen.phase == "Running" and not seen.gone and seen.running_at is None:
                seen.running_at = now
            stopped = event_type == "DELETED" or seen.phase in ("Succeeded", "Failed")
            if stopped and seen.stopped_at is None:
                seen.stopped_at = now

    def of(self, system: System) -> list[PodSeen]:
        with self.lock:
            return list(self.gangs.get((system.name, system.gang), {}).values())

    def running(self, system: System) -> list[PodSeen]:
        return [p for p in self.of(system) if p.running_at is not None and not p.gone]


@dataclass
class Round:
    evicted_at: float  # when the eviction was requested (Unix time)
    fresh: float | None  # seconds to a whole fresh gang Running; None: the gang was not restarted
    replaced: float | None  # seconds until the first pod created after the eviction ran
    stopped: float | None = None  # seconds until every pod of the old gang had stopped or gone
    created: float | None = None  # seconds until the watch showed both pods of the fresh gang
    cpu: dict[str, float] = field(default_factory=dict)  # process -> CPU s, eviction to settled


def one_eviction(
    core: client.CoreV1Api,
    pods: PodWatch,
    system: System,
    namespace: str,
    processes: dict[str, int],
) -> Round:
    def whole() -> list[PodSeen] | None:
        gang = pods.running(system)
        return gang if len(gang) == 2 else None

    gang = wait_for(whole, 60, f"{system.name}'s gang to run", interval=0.02)
    old = {p.name for p in gang}
    victim = system.victim([{"name": p.name, "labels": p.labels} for p in gang])
    cpu_before = cpu_seconds(processes)
    started = time.time()
    core.create_namespaced_pod_eviction(victim, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=victim, namespace=namespace)))  # fmt: skip

    def new_running() -> list[PodSeen]:
        return [p for p in pods.running(system) if p.seen_at >= started]

    deadline = time.monotonic() + NOT_RESTARTED_AFTER
    fresh = replaced = None
    while time.monotonic() < deadline and fresh is None:
        ran = sorted(p.running_at for p in new_running())
        if ran and replaced is None:
            replaced = ran[0] - started
        if len(ran) == 2:
            fresh = ran[1] - started
        time.sleep(0.02)
    # Settle: the gang whole and nothing of it still going, so that rounds do not overlap.
    wait_for(lambda: len(pods.running(system)) == 2
             and all(p.gone or p.running_at for p in pods.of(system)), 60,
             f"{system.name} to settle", interval=0.02)  # fmt: skip
    cpu = {name: used - cpu_before[name] for name, used in cpu_seconds(processes).items()}
    time.sleep(2)
    stops = [p.stopped_at for p in pods.of(system) if p.name in old]
    stopped = max(stops) - started if stops and None not in stops else None
    fresh_pods = [p.seen_at for p in pods.of(system) if p.seen_at >= started]
    created = max(fresh_pods) - started if fresh is not None and fresh_pods else None
    return Round(started, fresh, replaced, stopped, created, cpu)


def describe(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"p50 {statistics.median(values):6.2f}  p95 {percentile(values, 0.95):6.2f}  "
            f"max {max(values):6.2f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="evictions per system (>= 4)")
    parser.add_argument(
        "--kwok", action="store_true", help="kwok nodes that end pods as a kubelet does"
    )
    parser.add_argument("--cluster", help="use this running `rljob testenv` cluster")
    parser.add_argument("--pod-by-pod", action="store_true",
                        help=f"also rljob with gangScheduling: Off ({POD_BY_POD!r})")  # fmt: skip
    args = parser.parse_args()
    binaries.install(say=say, peers=True)
    started: list[Any] = []
    with bench_cluster("peers", args.cluster, kwok_nodes=KWOK_NODES if args.kwok else 0) as bench:
        kubeconfig, namespace, work = bench.kubeconfig, bench.namespace, bench.work
        try:
            core, custom = client.CoreV1Api(bench.api), client.CustomObjectsApi(bench.api)
            pv = bind_claim(core, namespace)
            root = work / "agents"
            volume = work / "volume" if args.kwok else claim_dir(root, namespace, "ckpts")
            seed_checkpoint(volume)

            floor = FloorController(bench.api, namespace, f"{BENCH_LABEL}=floor").start()
            started.append(floor)
            makers = [rljob_system, jobset_system, pytorchjob_system, partial(floor_system, floor)]
            if args.pod_by_pod:
                makers.insert(1, rljob_pod_by_pod_system)
            if args.kwok:
                systems = [make("gang", {"type": "kwok"}) for make in makers]
            else:
                systems = [make() for make in makers]
                for system in systems:
                    pool = AgentPool(kubeconfig, root, [f"{system.name}-{i}" for i in range(2)],
                                     labels={"pool": system.name}).start()  # fmt: skip
                    started.append(pool)
            say("starting rljob's operator, JobSet and training-operator")
            operator = OperatorProcess(kubeconfig, namespace, work / "rljob-operator.log",
                                       RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}")  # fmt: skip
            operator.start()
            started.append(operator)
            peer_controllers = [JobSetController(kubeconfig, work),
                                TrainingOperator(kubeconfig, work, namespace)]  # fmt: skip
            for peer in peer_controllers:
                peer.up()
                started.append(peer)
            processes = {**control_plane_pids(bench.name), CONTROLLER["rljob"]: operator.proc.pid,
                         **{peer.name: peer.proc.pid for peer in peer_controllers}}  # fmt: skip
            pods = PodWatch(core, namespace)
            pods.start()
            for system in systems:
                system.create(custom, namespace)
            results: dict[str, list[Round]] = {s.name: [] for s in systems}
            for index in range(args.rounds):
                turn = index % len(systems)
                for system in systems[turn:] + systems[:turn]:
                    got = one_eviction(core, pods, system, namespace, processes)
                    results[system.name].append(got)
                say(f"round {index + 1}/{args.rounds}: " + ", ".join(
                    f"{s.name} {r.fresh:.2f}s" if (r := results[s.name][-1]).fresh is not None
                    else f"{s.name} not restarted" for s in systems))  # fmt: skip
            print_report(results, systems, custom, namespace, args.rounds, args.kwok)
            core.delete_persistent_volume(pv)
        finally:
            for thing in reversed(started):
                thing.stop()
    return 0


def print_report(results, systems, custom, namespace, rounds, kwok) -> None:
    nodes = "kwok nodes that end pods as kubelets do" if kwok else "node agents as kubelets"
    print(f"\n{rounds} evictions per system, interleaved; seconds from the eviction request "
          f"({nodes}, the local control plane; one run)")  # fmt: skip
    print(f"{'system':<17} {'whole gang fresh and Running':<40} {'evicted pod replaced':<40}")
    medians = {}
    for system in systems:
        fresh = [r.fresh for r in results[system.name] if r.fresh is not None]
        replaced = [r.replaced for r in results[system.name] if r.replaced is not None]
        missed = len(results[system.name]) - len(fresh)
        label = describe(fresh) + (f"  ({missed}x gang not restarted)" if missed else "")
        print(f"{system.name:<17} {label:<40} {describe(replaced):<40}")
        if fresh and not missed:
            medians[system.name] = statistics.median(fresh)
    print("\nthe old gang's own stop (every pod stopped or gone), and the rest of the recovery:")
    for system in systems:
        rounds_ = [r for r in results[system.name] if r.fresh is not None and r.stopped is not None]
        stops = [r.stopped for r in rounds_]
        share = [r.fresh - r.stopped for r in rounds_]
        print(f"  {system.name:<17} stop {describe(stops):<36} after it {describe(share)}")
    print("\nafter the stop: until both fresh pods were seen (the controller's share), and from\n"
          "then until both ran (the scheduler's and the node's):")  # fmt: skip
    for system in systems:
        rounds_ = [r for r in results[system.name] if None not in (r.fresh, r.stopped, r.created)]
        to_create = [r.created - r.stopped for r in rounds_]
        to_run = [r.fresh - r.created for r in rounds_]
        print(f"  {system.name:<17} created {describe(to_create):<33} ran {describe(to_run)}")
    print_cpu(results, systems)
    for rljob in ("rljob", POD_BY_POD):
        if rljob in results and "floor" in results:
            print_over_floor(rljob, results[rljob], results["floor"])
    print_rljob_timeline(results["rljob"], custom, namespace)
    print(f"\nafter {rounds} evictions in a row:")
    for system in systems:
        runs, what = system.still_runs(custom, namespace)
        print(f"  {system.name:<17} {'still runs' if runs else 'STOPPED'}: {what}")
    peers = {k: v for k, v in medians.items() if k not in ("rljob", POD_BY_POD, "floor")}
    if "rljob" in medians and peers:
        best = min(peers, key=peers.get)
        print(f"\nrljob p50 vs the faster peer that restarts the gang ({best}): "
              f"{peers[best] / medians['rljob']:.1f}x")  # fmt: skip


def print_cpu(results: dict[str, list[Round]], systems: list[System]) -> None:
    """The CPU seconds each recovery cost, from the eviction until the gang ran whole again:
    on two cores the old gang's torchrun shares them with this work while it stops."""
    print("\nCPU seconds per recovery (p50), eviction until the gang is whole again: the control\n"
          "plane's processes, and the system's own controller where it is a process of its own\n"
          "(the floor's runs in this one, beside the node agents):")  # fmt: skip
    for system in systems:
        rounds_ = [r for r in results[system.name] if r.cpu]
        if not rounds_:
            continue
        names = sorted(rounds_[0].cpu, key=lambda n: -statistics.median(r.cpu[n] for r in rounds_))
        plane = [sum(v for n, v in r.cpu.items() if n in CONTROL_PLANE) for r in rounds_]
        parts = ", ".join(f"{n} {statistics.median(r.cpu[n] for r in rounds_):.2f}" for n in names
                          if n in CONTROL_PLANE or n == CONTROLLER.get(system.name))  # fmt: skip
        print(f"  {system.name:<17} control plane {statistics.median(plane):.2f} ({parts})")


def over_floor(system: list[float], floor: list[float]) -> str:
    """A system's times over the floor's, at p50, p95 and max."""
    if not system or not floor:
        return "-"
    marks = [(statistics.median, "p50"), (lambda v: percentile(v, 0.95), "p95"), (max, "max")]
    return "  ".join(f"{name} {mark(system) / mark(floor):.2f}x" for mark, name in marks)


def print_over_floor(name: str, rljob: list[Round], floor: list[Round]) -> None:
    fresh = [r.fresh for r in rljob if r.fresh is not None]
    floor_fresh = [r.fresh for r in floor if r.fresh is not None]
    print(f"{name} over the floor, whole gang fresh and Running: {over_floor(fresh, floor_fresh)}")
    share = [r.fresh - r.stopped for r in rljob if r.fresh is not None and r.stopped is not None]
    floor_share = [r.fresh - r.stopped for r in floor
                   if r.fresh is not None and r.stopped is not None]  # fmt: skip
    print(f"{name} over the floor, after the old gang stopped: {over_floor(share, floor_share)}")


def print_rljob_timeline(rounds: list[Round], custom, namespace: str) -> None:
    """Where rljob's recoveries spent their time, from its own status.recoveries."""
    job = custom.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "gang")
    records = (job.get("status") or {}).get("recoveries") or []
    stages: dict[str, list[float]] = {"detectedAt": [], "gangCreatedAt": [], "firstRunningAt": []}
    for round_, record in zip(rounds[-len(records) :], records[-len(rounds) :], strict=False):
        for stage, values in stages.items():
            if record.get(stage):
                values.append(parse_iso(record[stage]).timestamp() - round_.evicted_at)
    print("rljob's own record (status.recoveries), seconds from the eviction request:")
    for stage, values in stages.items():
        print(f"  {stage:<15} {describe(values)}")


if __name__ == "__main__":
    sys.exit(main())
