"""GPU-seconds lost to Kueue's preemptions with rljob's priority boost and without it, in one
run (spec.queueing.priorityBoost; docs/scheduling.md).

A ClusterQueue of QUOTA GPUs is full of 1-GPU rljob jobs of one priority, each saving at its
own pace (a seeded step time and save interval). A seeded sequence of arrivals follows: the
jobs' clock moves on by a random time (each job's progress.json and checkpoint folders are
written as its trainer would have), then a job of a higher class arrives and needs one GPU.
Kueue preempts one of the queued jobs; what that victim loses is its steps since its newest
checkpoint times its step time. The urgent job then ends, the victim is readmitted and resumes
from its checkpoint, and the next arrival comes. The same sequence runs twice, on two
ClusterQueues: the jobs with the boost on, and with it off (Kueue then takes the most recently
admitted). "Least possible" is, at each arrival, the smallest loss of any running job.

    .venv/bin/python benchmarks/preemption_cost.py [--jobs 6] [--arrivals 8] [--seed 7]

Kueue v0.17.0's manager (built from source, its PriorityBoost gate on) runs on a local control
plane with kwok nodes; the operator reads the checkpoint folders from a local directory. The
clock of the jobs is simulated (files written ahead of each arrival): the figures are the
GPU-seconds the files say were at risk, not measured training time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from bench_cluster import bench_cluster, say  # noqa: E402
from kube_steps import bind_claim, wait_for  # noqa: E402
from kubernetes import client  # noqa: E402
from rljob_contract import progress  # noqa: E402
from rljob_contract.manifest import write_manifest  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.api.spec import PriorityBoostSpec  # noqa: E402
from rljob_operator.reconcile.priority_boost import boost_for  # noqa: E402
from rljob_testenv import cluster  # noqa: E402
from rljob_testenv import kueue as testenv_kueue  # noqa: E402
from rljob_testenv.operator_process import OperatorProcess, run_operator  # noqa: E402

HIGH_CLASS, HIGH_VALUE = "rljob-bench-urgent", 1000
# One point per 10 GPU-seconds at risk, so that jobs rarely tie; below the class gap.
POLICY = {"maxBoost": HIGH_VALUE - 1, "gpuSecondsPerPoint": 10, "minIntervalSeconds": 1}
STEP_SECONDS = (5.0, 10.0, 20.0, 30.0)
SAVE_EVERY = (10, 20, 30, 50)


@dataclass
class Trainer:
    """A job's simulated trainer: it finishes a step every `step_seconds`, saves every
    `save_every` steps, and starts over from its checkpoint after a preemption. It starts
    from a checkpoint (the operator prices steps from progress.json only after one)."""

    name: str
    step_seconds: float
    save_every: int
    finished: int = 0
    saved: int = 0

    def __post_init__(self) -> None:
        self.finished = self.saved = self.save_every

    def advance(self, seconds: float) -> None:
        self.finished += int(seconds // self.step_seconds)
        self.saved = self.finished - self.finished % self.save_every

    @property
    def at_risk(self) -> float:
        """GPU-seconds since the newest checkpoint (one GPU)."""
        return (self.finished - self.saved) * self.step_seconds

    def restart(self) -> None:
        self.finished = self.saved


def write_state(volume: Path, trainer: Trainer) -> None:
    """The trainer's checkpoint folder and progress.json, as it leaves them."""
    root = volume / trainer.name
    folder = root / f"global_step_{trainer.saved}"
    if trainer.saved and not folder.exists():
        (folder / "actor").mkdir(parents=True)
        (folder / "actor" / "__0_0.distcp").write_bytes(b"weights")
        (folder / "actor" / ".metadata").write_bytes(b"metadata")
        write_manifest(folder, step=trainer.saved, world_size=1)
    root.mkdir(parents=True, exist_ok=True)
    record = {progress.STEP: trainer.finished, progress.STEP_SECONDS: trainer.step_seconds}
    (root / progress.PROGRESS_FILE_NAME).write_text(json.dumps(record))


def job(name: str, queue: str, nodes: list[str], boost: bool, priority_class: str | None = None):
    spec = {
        "image": "rljob-trainer:dev",
        "nnodes": 1,
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                       "directory": name},
        "queueing": {"priorityBoost": {"enabled": boost, **POLICY}},
        "template": {"spec": {
            "terminationGracePeriodSeconds": 0,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}},
            **({"priorityClassName": priority_class} if priority_class else {}),
        }},
    }  # fmt: skip
    metadata = {"name": name, "labels": {c.KUEUE_QUEUE_LABEL: queue}}
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": metadata, "spec": spec}


class Cluster:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core, self.custom, self.namespace = (
            client.CoreV1Api(api), client.CustomObjectsApi(api), namespace,
        )  # fmt: skip

    def create(self, body) -> None:
        self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, body
        )

    def status(self, name: str) -> dict:
        got = self.custom.get_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
        )
        return got.get("status") or {}

    def pods(self, name: str) -> list:
        selector = f"{c.LABEL_JOB}={name}"
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def running(self, name: str) -> bool:
        """The job's current attempt runs, and no pod of it is going."""
        pods = self.current(name)
        return bool(pods) and all(
            p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in pods
        )

    def current(self, name: str) -> list:
        attempt = str(self.status(name).get("attempt", 0))
        return [p for p in self.pods(name) if p.metadata.labels[c.LABEL_ATTEMPT] == attempt]

    def preemptions(self, name: str) -> int:
        return self.status(name).get("preemptions", 0)

    def stopped(self, before: dict[str, int]) -> str | None:
        """The job Kueue is stopping or has stopped since `before` (preemptions by job)."""
        for name, count in before.items():
            if any(p.metadata.deletion_timestamp for p in self.current(name)):
                return name
            if self.preemptions(name) > count:
                return name
        return None

    def end(self, name: str, exit_code: int, attempt: int) -> None:
        """The attempt's pods end, as their kubelet reports it once the trainer exits."""
        for pod in self.pods(name):
            if pod.metadata.labels[c.LABEL_ATTEMPT] != str(attempt):
                continue
            if pod.status.phase in ("Succeeded", "Failed"):
                continue
            terminated = {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}
            container = {
                "name": c.TRAINER_CONTAINER, "image": "rljob-trainer:dev", "imageID": "",
                "ready": False, "restartCount": 0, "state": {"terminated": terminated},
            }  # fmt: skip
            phase = "Failed" if exit_code else "Succeeded"
            status = {"phase": phase, "containerStatuses": [container]}
            try:
                self.core.patch_namespaced_pod_status(
                    pod.metadata.name, self.namespace, {"status": status}
                )
            except client.ApiException as exc:
                if exc.status != 404:  # gone already
                    raise

    def boost(self, name: str) -> str | None:
        attempt = self.status(name).get("attempt", 0)
        try:
            workload = self.custom.get_namespaced_custom_object(
                c.KUEUE_GROUP, c.KUEUE_VERSION, self.namespace, "workloads", f"{name}-a{attempt}"
            )
        except client.ApiException:
            return None
        annotations = workload["metadata"].get("annotations") or {}
        return annotations.get(c.KUEUE_PRIORITY_BOOST_ANNOTATION)


def queues(custom: client.CustomObjectsApi, namespace: str, name: str, quota: int) -> str:
    """A ResourceFlavor, a ClusterQueue of `quota` GPUs that preempts lower priorities within
    itself, and a LocalQueue of the namespace on it."""
    group = f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"
    gpus = {"name": "nvidia.com/gpu", "nominalQuota": quota}
    custom.create_cluster_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, "resourceflavors", {
        "apiVersion": group, "kind": "ResourceFlavor", "metadata": {"name": name}})  # fmt: skip
    custom.create_cluster_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, "clusterqueues", {
        "apiVersion": group, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                 "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                     {"name": name, "resources": [gpus]}]}]},
    })  # fmt: skip
    custom.create_namespaced_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, namespace,
        "localqueues", {"apiVersion": group, "kind": "LocalQueue", "metadata": {"name": name},
                        "spec": {"clusterQueue": name}})  # fmt: skip
    return name


@dataclass(frozen=True)
class Arrival:
    victim: str
    lost: float  # GPU-seconds the victim lost
    least: float  # the smallest loss any running job would have had


def run_mode(kube: Cluster, volume: Path, nodes: list[str], queue: str, boost: bool,
             args: argparse.Namespace) -> list[Arrival]:  # fmt: skip
    rng = random.Random(args.seed)  # the same sequence for both modes
    mode = "on" if boost else "off"
    trainers = [
        Trainer(f"{mode}-j{i}", rng.choice(STEP_SECONDS), rng.choice(SAVE_EVERY))
        for i in range(args.jobs)
    ]
    names = [t.name for t in trainers]
    by_name = {t.name: t for t in trainers}
    policy = PriorityBoostSpec(enabled=True, max_boost=POLICY["maxBoost"],
                               gpu_seconds_per_point=POLICY["gpuSecondsPerPoint"])  # fmt: skip
    for trainer in trainers:  # admitted one by one, in order
        write_state(volume, trainer)
        kube.create(job(trainer.name, queue, nodes, boost))
        wait_for(lambda t=trainer: kube.running(t.name), 120, f"{trainer.name} to run")
    arrivals = []
    for index in range(args.arrivals):
        for trainer in trainers:
            trainer.advance(rng.uniform(60, 1200))
            write_state(volume, trainer)
        if boost:  # Kueue decides on what the operator has written: wait for it
            for trainer in trainers:
                want = str(boost_for(trainer.at_risk, policy))
                wait_for(lambda t=trainer, w=want: (kube.boost(t.name) or "0") == w, 60,
                         f"{trainer.name}'s boost of {want}")  # fmt: skip
        least = min(t.at_risk for t in trainers)
        urgent = f"{mode}-urgent-{index}"
        before = {name: kube.preemptions(name) for name in names}
        attempts = {name: kube.status(name).get("attempt", 0) for name in names}
        kube.create(job(urgent, queue, nodes, False, HIGH_CLASS))
        victim = wait_for(lambda b=before: kube.stopped(b), 120, f"a victim for {urgent}")
        arrivals.append(Arrival(victim, by_name[victim].at_risk, least))
        say(f"{mode}: {urgent} preempted {victim}, lost {by_name[victim].at_risk:.0f} GPU-s "
            f"(least possible {least:.0f})")  # fmt: skip
        kube.end(victim, 143, attempts[victim])
        wait_for(lambda u=urgent: kube.running(u), 120, f"{urgent} to run")
        kube.end(urgent, 0, 0)
        by_name[victim].restart()
        write_state(volume, by_name[victim])
        wait_for(lambda v=victim: kube.running(v), 120, f"{victim} to run again")
    return arrivals


def table(results: dict[str, list[Arrival]]) -> str:
    lines = [
        "| boost | arrivals | lost GPU-seconds | mean per preemption | least possible (sum) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode, arrivals in results.items():
        lost, least = sum(a.lost for a in arrivals), sum(a.least for a in arrivals)
        lines.append(f"| {mode} | {len(arrivals)} | {lost:,.0f} | {lost / len(arrivals):,.0f} "
                     f"| {least:,.0f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=6, help="1-GPU jobs filling the queue")
    parser.add_argument("--arrivals", type=int, default=8, help="urgent jobs, one at a time")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cluster", help="an existing local cluster to use")
    args = parser.parse_args()
    with bench_cluster("preempt", args.cluster) as bench:
        # Both modes' jobs and an urgent one each at once, 8 GPUs a node.
        nodes = cluster.add_gpu_nodes(bench.name, (2 * (args.jobs + 1) + 7) // 8, prefix="preempt")
        manager = testenv_kueue.start(bench.kubeconfig, bench.work / "kueue")
        scheduling = client.SchedulingV1Api(bench.api)
        scheduling.create_priority_class(client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=HIGH_CLASS), value=HIGH_VALUE))  # fmt: skip
        core, custom = client.CoreV1Api(bench.api), client.CustomObjectsApi(bench.api)
        pv = bind_claim(core, bench.namespace)
        volume = bench.work / "volume"
        volume.mkdir()
        limit = ["--max-priority-boost", str(POLICY["maxBoost"])]  # the administrator's leave
        args = ["--standalone", "--namespace", bench.namespace, *limit]
        operator = OperatorProcess(bench.kubeconfig, bench.namespace, bench.work / "operator.log",
                                   args=args,
                                   RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}")  # fmt: skip
        runner = run_operator(operator)
        next(runner)
        try:
            kube = Cluster(bench.api, bench.namespace)
            results = {}
            for boost in (True, False):
                name = f"{bench.namespace}-{'on' if boost else 'off'}"
                queue = queues(custom, bench.namespace, name, args.jobs)
                results["on" if boost else "off"] = run_mode(
                    kube, volume, nodes, queue, boost, args
                )
            print(table(results))
        finally:
            next(runner, None)
            scheduling.delete_priority_class(HIGH_CLASS)
            core.delete_persistent_volume(pv)
            manager.down()


if __name__ == "__main__":
    main()
