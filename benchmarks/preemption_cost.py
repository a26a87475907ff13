"""GPU-seconds lost to Kueue's preemptions with rljob's priority boost (default and tuned
policy) and without it, over several seeds, each queue offered the same arrivals on the same
state of the jobs (spec.queueing.priorityBoost; docs/scheduling.md).

Real: Kueue v0.17.0's manager (built from source, its PriorityBoost gate on) picks every
victim, on a local control plane whose kwok GPU nodes end a deleted pod as a kubelet does;
the operator (`rljob operator --max-priority-boost 99`, the chart's limit) reads each job's
files on the checkpoint volume (progress.json, complete global_step_N folders) and writes
the boost on the job's Workload. Simulated: the jobs' clock and files. No trainer runs; the
files say what a trainer would have done by then.

The jobs. Per seed, gangs of 1, 2 (two pods of 1 GPU) or 4 GPUs (two pods of 2) fill QUOTA
GPUs, each with a seeded step time, save interval and save time, all of rljob's own trainer
(it saves on notice, and drops the step in progress where only the save fits the grace).
Two populations of the same jobs, which differ only in their pods' grace:
- "save on notice": 300 s (rljob's default), where most saves fit;
- "no save in time": 30 s (Kubernetes' default), below every save time: a preemption loses
  all unsaved work, and the operator's measure is the raw unsaved GPU-seconds.

The queues. Per seed, five ClusterQueues of QUOTA GPUs hold the same jobs, admitted one a
second in the same order everywhere: one without the boost, and one per population and
policy: `default` (spec.queueing.priorityBoost at its defaults: gpuSecondsPerPoint 3600,
maxBoost unset, so the operator's 99) and `tuned` (gpuSecondsPerPoint
TUNED_GPU_SECONDS_PER_POINT); both with minIntervalSeconds 1 (the default 300 would only
delay the writes; the operator runs with --min-boost-interval-seconds 1, below its floor of
60, to allow it). Without the boost Kueue reads neither the files nor the grace, so the one
queue without it stands for both populations. The jobs of a population read the same
checkpoint folders in every queue of it.

The arrivals, seeded. Before each, the jobs' clock moves on and every job's files are
rewritten as of then (its last finished step, its newest checkpoint), and the benchmark waits
until every boosted Workload carries what the operator computes from them. A job of a class
far above (URGENT_VALUE, beyond any boost) that needs 1, 2 or 4 GPUs then arrives in all five
queues at once, and Kueue preempts in each what it picks.

Every queue is then brought back to one state, so that the next arrival meets the same jobs
everywhere: every job that any queue lost is restarted in every queue (suspended, where it
was no victim too, until the urgent jobs end, then resumed; the pods of a victim's gated next
attempt, which no kubelet ends, are failed at once, as kube-controller-manager's pod GC would
within 20 s) and resumes on the clock from where its trainer would (its last finished step
where its save on notice fits the grace, else its checkpoint); the restarted jobs are
readmitted one a second in the same order everywhere, so Kueue's admission times (whole
seconds), which break its ties (the most recently admitted first), order the jobs alike in
every queue. The state each queue meets thus follows every queue's choices, the same for
all; each queue is charged only for its own victims.

The loss, the measure the operator's boost is computed from (reconcile.boost.pricing,
AtRisk): each victim's gang GPUs x the work a preemption now loses (0 where its step and save
fit the grace, at most one step where only the save fits, else all its unsaved steps x its
step time). Restart seconds count 0 here: a restart on kwok nodes takes seconds, not a real
one's minutes (the operator adds the few it measured, status.recoveries, to its boost).
"Least possible": the smallest total loss of any set of the queue's jobs that frees the GPUs
the arrival needs (by brute force), on the same files.

    .venv/bin/python benchmarks/preemption_cost.py [--seeds 1 2 3] [--arrivals 8]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from bench_cluster import bench_cluster, say  # noqa: E402
from kube_steps import bind_claim, wait_for  # noqa: E402
from kubernetes import client  # noqa: E402
from rljob_contract import progress  # noqa: E402
from rljob_contract.manifest import write_manifest  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.api.spec import PriorityBoostSpec  # noqa: E402
from rljob_operator.api.status import JobStatus  # noqa: E402
from rljob_operator.reconcile.boost.pricing import AtRisk, boost_for, restart_seconds  # noqa: E402
from rljob_testenv import kueue as testenv_kueue  # noqa: E402
from rljob_testenv.operator_process import OperatorProcess  # noqa: E402

QUOTA = 16  # GPUs of each ClusterQueue, all held by its jobs before every arrival
SHAPES = {1: (1, 1), 2: (2, 1), 4: (2, 2)}  # a gang's GPUs: (pods, GPUs a pod)
STEP_SECONDS = (60, 120, 300, 600)
SAVE_EVERY = (10, 25, 50)  # steps
SAVE_SECONDS = (60, 240, 900)
GAP_SECONDS = (600, 3600)  # the jobs' clock between two arrivals
POPULATIONS = {"save on notice": 300, "no save in time": 30}  # the pods' grace, seconds
LIMIT = 99  # the operator's --max-priority-boost (the chart's kueue.maxPriorityBoost)
URGENT_CLASS, URGENT_VALUE = "rljob-bench-urgent", 1000  # far above 0 + LIMIT
DEFAULT_PER_POINT = PriorityBoostSpec().gpu_seconds_per_point
# Two GPU-minutes a point: 99 points reach 11,880 GPU-seconds, above about 80 % of a job's
# losses without a save in time and 90 % with one, so that the cheap victims, the ones Kueue
# should find, get points of their own.
TUNED_GPU_SECONDS_PER_POINT = 120
POLICIES = {"default": DEFAULT_PER_POINT, "tuned": TUNED_GPU_SECONDS_PER_POINT}
COLUMNS = ("without", *POLICIES)  # of the tables, beside the least possible
WAIT_SECONDS = 180


@dataclass(frozen=True)
class Mode:
    """A ClusterQueue's jobs: their gpuSecondsPerPoint (None: no boost) and grace."""

    name: str
    per_point: int | None
    grace: int


WITHOUT = Mode("off", None, POPULATIONS["save on notice"])
MODES = (WITHOUT, *(
    Mode(f"{policy}-g{grace}", per_point, grace)
    for grace in POPULATIONS.values()
    for policy, per_point in POLICIES.items()
))  # fmt: skip


def boosted(policy: str, grace: int) -> Mode:
    return next(m for m in MODES if m.per_point == POLICIES[policy] and m.grace == grace)


@dataclass(frozen=True)
class Progress:
    finished: int  # the last finished step
    saved: int  # the newest complete checkpoint's step


@dataclass(frozen=True)
class Track:
    """Where a job's run stands: it started or resumed at `step`, saved, at `clock`."""

    step: int
    clock: float


@dataclass(frozen=True)
class Trainer:
    """A job's simulated trainer: a step every `step_seconds`, a save every `save_every`
    steps, and a save on notice that takes `save_seconds`. Its clock starts `phase` seconds
    into its run (after its first save, since the operator prices steps from progress.json
    only once there is a checkpoint)."""

    key: str
    gpus: int
    step_seconds: float
    save_every: int
    save_seconds: float
    phase: float

    def start(self) -> Track:
        return Track(0, -self.phase)

    def at(self, track: Track, clock: float) -> Progress:
        finished = track.step + int((clock - track.clock) // self.step_seconds)
        return Progress(finished, max(track.step, finished - finished % self.save_every))

    def restart(self, track: Track, clock: float, grace: int) -> Track:
        """The run resumed at once after a stop at `clock`: from its last finished step where
        its save on notice fits the grace (it saves that step), else from its checkpoint."""
        state = self.at(track, clock)
        return Track(state.finished if self.save_seconds <= grace else state.saved, clock)

    def risk(self, state: Progress, grace: int, restart: float = 0.0) -> AtRisk:
        """The operator's own measure of what a preemption now would lose."""
        return AtRisk(
            self.gpus, datetime.now(UTC), saved_step=state.saved, finished_step=state.finished,
            step_seconds=self.step_seconds, save_seconds=self.save_seconds,
            grace_seconds=grace, abandons_step=True, restart_seconds=restart,
        )  # fmt: skip

    def loss(self, state: Progress, grace: int) -> float:
        return self.risk(state, grace).gpu_seconds(datetime.now(UTC))


@dataclass(frozen=True)
class Scenario:
    """One seed's jobs (in admission order) and arrivals: (the clock, the GPUs it needs)."""

    seed: int
    trainers: tuple[Trainer, ...]
    arrivals: tuple[tuple[float, int], ...]


def draw(seed: int, arrivals: int) -> Scenario:
    """Jobs of seeded shapes that fill QUOTA exactly, and arrivals at seeded times."""
    rng = random.Random(seed)
    trainers: list[Trainer] = []
    left = QUOTA
    while left:
        gpus = rng.choice([g for g in SHAPES if g <= left])
        step, every = rng.choice(STEP_SECONDS), rng.choice(SAVE_EVERY)
        phase = rng.uniform(every * step, 2 * every * step)
        trainers.append(Trainer(f"j{len(trainers)}", gpus, step, every,
                                rng.choice(SAVE_SECONDS), phase))  # fmt: skip
        left -= gpus
    clock, times = 0.0, []
    for _ in range(arrivals):
        clock += rng.uniform(*GAP_SECONDS)
        times.append((clock, rng.choice(list(SHAPES))))
    return Scenario(seed, tuple(trainers), tuple(times))


def least_possible(
    trainers: Iterable[Trainer], states: dict[str, Progress], need: int, grace: int
) -> float:
    """The smallest total loss of any set of jobs with `need` GPUs or more (all of a lower
    class than the arrival, so any set is one Kueue's policy allows)."""
    costs = [(t.gpus, t.loss(states[t.key], grace)) for t in trainers]
    return min(
        sum(loss for _, loss in chosen)
        for size in range(1, len(costs) + 1)
        for chosen in itertools.combinations(costs, size)
        if sum(gpus for gpus, _ in chosen) >= need
    )


def write_state(folder: Path, trainer: Trainer, state: Progress) -> None:
    """The job's checkpoint folder as its trainer leaves it: a complete global_step_N for
    its newest save, and progress.json with the last finished step, step and save times."""
    step_folder = folder / f"global_step_{state.saved}"
    if not step_folder.exists():
        (step_folder / "actor").mkdir(parents=True)
        (step_folder / "actor" / "__0_0.distcp").write_bytes(b"weights")
        (step_folder / "actor" / ".metadata").write_bytes(b"metadata")
        write_manifest(step_folder, step=state.saved, world_size=1)
    record = {progress.STEP: state.finished, progress.STEP_SECONDS: trainer.step_seconds,
              progress.SAVE_SECONDS: trainer.save_seconds}  # fmt: skip
    (folder / progress.PROGRESS_FILE_NAME).write_text(json.dumps(record))


def job_body(
    name: str, queue: str, gpus: int, directory: str, mode: Mode,
    priority_class: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """An RLTrainingJob of `gpus` GPUs in `queue`, with the mode's boost and grace."""
    pods, per_pod = SHAPES[gpus]
    boost: dict[str, Any] = {"enabled": mode.per_point is not None}
    if mode.per_point is not None:
        boost |= {"gpuSecondsPerPoint": mode.per_point, "minIntervalSeconds": 1}
    template: dict[str, Any] = {"terminationGracePeriodSeconds": mode.grace}
    if priority_class:
        template["priorityClassName"] = priority_class
    spec = {
        "image": "rljob-trainer:dev", "nnodes": pods, "nprocPerNode": per_pod,
        "resources": {"limits": {"nvidia.com/gpu": per_pod}},
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                       "directory": directory},
        "queueing": {"priorityBoost": boost}, "template": {"spec": template},
    }  # fmt: skip
    metadata = {"name": name, "labels": {c.KUEUE_QUEUE_LABEL: queue}}
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": metadata, "spec": spec}


class Kube:
    """The namespace's jobs, pods and Kueue Workloads, each kind listed in one request."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace = namespace

    def create(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, body
        )

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
        )

    def suspend(self, name: str, suspended: bool) -> None:
        self.custom.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name, {"spec": {"suspend": suspended}}
        )

    def statuses(self) -> dict[str, dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL
        )
        return {j["metadata"]["name"]: j.get("status") or {} for j in listed["items"]}

    def pods(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """Pods by (job, attempt), as plain JSON: the client's models of every pod at every
        poll would take CPU that the cluster under test needs."""
        reply = self.core.list_namespaced_pod(
            self.namespace, label_selector=c.LABEL_JOB, _preload_content=False
        )
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in json.loads(reply.data)["items"]:
            labels = pod["metadata"]["labels"]
            key = (labels[c.LABEL_JOB], labels.get(c.LABEL_ATTEMPT, ""))
            found.setdefault(key, []).append(pod)
        return found

    def boosts(self) -> dict[str, int]:
        """Each Workload's boost as Kueue reads it (none: 0)."""
        listed = self.custom.list_namespaced_custom_object(
            c.KUEUE_GROUP, c.KUEUE_VERSION, self.namespace, "workloads"
        )
        return {
            w["metadata"]["name"]: int(
                (w["metadata"].get("annotations") or {}).get(c.KUEUE_PRIORITY_BOOST_ANNOTATION, 0)
            )
            for w in listed["items"]
        }

    def end_unscheduled(self) -> None:
        """Fail the pods being deleted that have no node, as kube-controller-manager's pod
        GC does every 20 s (no kubelet ends them): Kueue's finalizer holds them until then,
        and the job's next attempt waits for them to go."""
        for pods in self.pods().values():
            for pod in filter(unscheduled_going, pods):
                try:
                    self.core.patch_namespaced_pod_status(
                        pod["metadata"]["name"], self.namespace, {"status": {"phase": "Failed"}}
                    )
                except client.ApiException as exc:
                    if exc.status != 404:  # gone since the list
                        raise

    def succeed(self, pods: list[dict[str, Any]]) -> None:
        """The pods end with exit 0, as their kubelet reports it once the trainer is done."""
        for pod in pods:
            terminated = {"exitCode": 0, "reason": "Completed"}
            container = {
                "name": c.TRAINER_CONTAINER, "image": "rljob-trainer:dev", "imageID": "",
                "ready": False, "restartCount": 0, "state": {"terminated": terminated},
            }  # fmt: skip
            status = {"phase": "Succeeded", "containerStatuses": [container]}
            self.core.patch_namespaced_pod_status(
                pod["metadata"]["name"], self.namespace, {"status": status}
            )


def unscheduled_going(pod: dict[str, Any]) -> bool:
    """A pod being deleted that never got a node (a victim's next attempt, still gated)."""
    going = pod["metadata"].get("deletionTimestamp") and not pod["spec"].get("nodeName")
    return bool(going) and pod["status"].get("phase") not in ("Succeeded", "Failed")


def runs(pods: list[dict[str, Any]], count: int) -> bool:
    """All `count` pods of a gang run, none of them going."""
    return len(pods) == count and all(
        p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        for p in pods
    )


States = dict[int, dict[str, Progress]]  # every job's files, by grace and key


@dataclass(frozen=True)
class Arrival:
    """An arrival's snapshot of the jobs, the GPUs it needed, and each queue's victims."""

    states: States
    need: int
    victims: dict[str, tuple[str, ...]]  # keys of the jobs preempted, by mode name


@dataclass
class Seed:
    """One seed's jobs in the five queues of the cluster, and where their runs stand in
    each population (the same in every queue of it)."""

    scenario: Scenario
    kube: Kube
    volume: Path
    queues: dict[str, str]  # ClusterQueue (and LocalQueue) by mode name
    tracks: dict[int, dict[str, Track]] = field(init=False)

    def __post_init__(self) -> None:
        starts = {t.key: t.start() for t in self.scenario.trainers}
        self.tracks = {grace: dict(starts) for grace in POPULATIONS.values()}

    def name(self, mode: Mode, key: str) -> str:
        return f"s{self.scenario.seed}-{mode.name}-{key}"

    def directory(self, grace: int, key: str) -> str:
        return f"s{self.scenario.seed}/g{grace}/{key}"

    def gpus(self, key: str) -> int:
        return next(t.gpus for t in self.scenario.trainers if t.key == key)

    def running(self, gangs: dict[str, int]) -> bool:
        """Each job named (with its GPUs) runs its current attempt."""
        statuses, pods = self.kube.statuses(), self.kube.pods()
        return all(
            name in statuses
            and runs(pods.get((name, str(statuses[name].get("attempt", 0))), []), SHAPES[gpus][0])
            for name, gpus in gangs.items()
        )

    def states(self, clock: float) -> States:
        return {
            grace: {t.key: t.at(tracks[t.key], clock) for t in self.scenario.trainers}
            for grace, tracks in self.tracks.items()
        }

    def write(self, states: States) -> None:
        for grace, by_key in states.items():
            for trainer in self.scenario.trainers:
                folder = self.volume / self.directory(grace, trainer.key)
                folder.mkdir(parents=True, exist_ok=True)
                write_state(folder, trainer, by_key[trainer.key])

    def admit(self, keys: Iterable[str], create: bool) -> None:
        """Each job of `keys` in every queue at once (created, or resumed), one key after the
        other a second apart, so that Kueue's admission times (whole seconds) order the jobs
        alike in every queue."""
        for key in keys:
            gangs = {self.name(m, key): self.gpus(key) for m in MODES}
            for mode in MODES:
                name = self.name(mode, key)
                if create:
                    self.kube.create(job_body(name, self.queues[mode.name], self.gpus(key),
                                              self.directory(mode.grace, key), mode))  # fmt: skip
                else:
                    self.kube.suspend(name, False)
            wait_for(lambda g=gangs: self.running(g), WAIT_SECONDS, f"{key} to run")
            time.sleep(1.0)

    def expected_boosts(self, states: States) -> dict[str, int]:
        """What the operator writes on each boosted job's Workload for these files, with the
        restart seconds its status measured."""
        statuses, now, expected = self.kube.statuses(), datetime.now(UTC), {}
        for mode in MODES:
            if mode.per_point is None:
                continue
            policy = PriorityBoostSpec(max_boost=LIMIT, gpu_seconds_per_point=mode.per_point)
            for trainer in self.scenario.trainers:
                status = statuses[self.name(mode, trainer.key)]
                restart = restart_seconds(JobStatus.from_dict(status))
                risk = trainer.risk(states[mode.grace][trainer.key], mode.grace, restart)
                workload = f"{self.name(mode, trainer.key)}-a{status.get('attempt', 0)}"
                expected[workload] = boost_for(risk.gpu_seconds(now), policy)
        return expected

    def boosts_written(self, states: States) -> bool:
        have, want = self.kube.boosts(), self.expected_boosts(states)
        return all(have.get(workload, 0) == value for workload, value in want.items())

    def offer(self, index: int, need: int) -> tuple[dict[str, tuple[str, ...]], list[str]]:
        """The arrival in every queue at once: each queue's victims (keys), seen once the
        urgent job runs there, and the urgent jobs' names."""
        before = {name: s.get("attempt", 0) for name, s in self.kube.statuses().items()}
        urgent = {m.name: self.name(m, f"u{index}") for m in MODES}
        for mode in MODES:
            name = urgent[mode.name]
            self.kube.create(job_body(name, self.queues[mode.name], need, name, WITHOUT,
                                      URGENT_CLASS))  # fmt: skip
        wait_for(lambda: self.running(dict.fromkeys(urgent.values(), need)), WAIT_SECONDS,
                 f"arrival {index} to run")  # fmt: skip
        pods = self.kube.pods()

        def stopped(mode: Mode, trainer: Trainer) -> bool:
            name = self.name(mode, trainer.key)
            return not runs(pods.get((name, str(before[name])), []), SHAPES[trainer.gpus][0])

        victims = {
            m.name: tuple(t.key for t in self.scenario.trainers if stopped(m, t)) for m in MODES
        }
        return victims, list(urgent.values())

    def restart(self, keys: list[str], urgent: list[str], clock: float) -> None:
        """Every queue restarts the jobs that any queue lost (`keys`): suspended in every
        queue, where they were not victims too, until the urgent jobs end; then resumed in
        the same order everywhere. The queues stay alike: the same runs, resumed from their
        checkpoints at `clock`, and the same order of admission."""
        for key in keys:
            for mode in MODES:
                self.kube.suspend(self.name(mode, key), True)
        names = [self.name(m, k) for m in MODES for k in keys]

        def suspended() -> bool:
            """Suspended, and their pods gone (those with no node ended as pod GC would)."""
            self.kube.end_unscheduled()
            statuses, pods = self.kube.statuses(), self.kube.pods()
            return all(statuses[n].get("phase") == "Suspended" for n in names) and not any(
                job in names for job, _ in pods
            )

        wait_for(suspended, WAIT_SECONDS, "the jobs to restart to be suspended")
        pods = self.kube.pods()
        for name in urgent:
            self.kube.succeed(pods[(name, "0")])
        for grace, tracks in self.tracks.items():
            trainers = {t.key: t for t in self.scenario.trainers}
            for key in keys:
                tracks[key] = trainers[key].restart(tracks[key], clock, grace)
        self.admit(keys, create=False)
        for name in urgent:
            self.kube.delete(name)

    def run(self) -> list[Arrival]:
        """The jobs admitted alike in every queue, then the arrivals one by one; at the end
        the jobs go, so that the operator's passes over them end."""
        self.write(self.states(0.0))
        self.admit([t.key for t in self.scenario.trainers], create=True)
        arrivals = []
        for index, (clock, need) in enumerate(self.scenario.arrivals):
            states = self.states(clock)
            self.write(states)
            wait_for(lambda s=states: self.boosts_written(s), WAIT_SECONDS, "the boosts")
            victims, urgent = self.offer(index, need)
            arrivals.append(Arrival(states, need, victims))
            say(f"seed {self.scenario.seed}, arrival {index} ({need} GPUs): "
                + "; ".join(f"{m}: {' '.join(v) or '-'}" for m, v in victims.items()))  # fmt: skip
            lost = {k for keys in victims.values() for k in keys}
            self.restart([t.key for t in self.scenario.trainers if t.key in lost], urgent, clock)
        for name in self.kube.statuses():
            self.kube.delete(name)
        wait_for(lambda: not self.kube.statuses(), WAIT_SECONDS, "the seed's jobs to go")
        return arrivals


def queues_for(custom: client.CustomObjectsApi, namespace: str, seed: int) -> dict[str, str]:
    """Per mode a ResourceFlavor, a ClusterQueue of QUOTA GPUs that preempts lower priorities
    within itself, and a LocalQueue of the namespace on it (all of one name)."""
    group = f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"
    names = {}
    for mode in MODES:
        name = f"{namespace}-s{seed}-{mode.name}"
        gpus = {"name": "nvidia.com/gpu", "nominalQuota": QUOTA}
        custom.create_cluster_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, "resourceflavors", {
            "apiVersion": group, "kind": "ResourceFlavor", "metadata": {"name": name}})  # fmt: skip
        custom.create_cluster_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, "clusterqueues", {
            "apiVersion": group, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {},
                     "preemption": {"withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                         {"name": name, "resources": [gpus]}]}]},
        })  # fmt: skip
        local = {"apiVersion": group, "kind": "LocalQueue", "metadata": {"name": name},
                 "spec": {"clusterQueue": name}}  # fmt: skip
        custom.create_namespaced_custom_object(
            c.KUEUE_GROUP, c.KUEUE_VERSION, namespace, "localqueues", local
        )
        names[mode.name] = name
    return names


@dataclass(frozen=True)
class Judged:
    """One arrival judged in one population: each column's loss, and the least possible."""

    lost: dict[str, float]  # by column: "without", "default", "tuned"
    least: float


def judge(scenario: Scenario, arrival: Arrival, grace: int) -> Judged:
    """The arrival's losses as the jobs of grace `grace` would have had them."""
    by_key = {t.key: t for t in scenario.trainers}

    def lost(mode: Mode) -> float:
        keys = arrival.victims[mode.name]
        return sum(by_key[k].loss(arrival.states[grace][k], grace) for k in keys)

    columns = {"without": lost(WITHOUT)}
    columns |= {policy: lost(boosted(policy, grace)) for policy in POLICIES}
    least = least_possible(scenario.trainers, arrival.states[grace], arrival.need, grace)
    return Judged(columns, least)


def table(population: str, results: dict[int, tuple[Scenario, list[Arrival]]]) -> str:
    """A row per seed, then the totals, for one population: lost GPU-seconds."""
    grace = POPULATIONS[population]
    lines = [
        f"{population} (grace {grace} s): lost GPU-seconds",
        "",
        "| seed | jobs' GPUs (admission order) | arrivals' GPUs | without boost "
        f"| default policy ({DEFAULT_PER_POINT} GPU-s/point) "
        f"| tuned policy ({TUNED_GPU_SECONDS_PER_POINT} GPU-s/point) | least possible |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    every: list[Judged] = []
    for seed, (scenario, arrivals) in results.items():
        judged = [judge(scenario, a, grace) for a in arrivals]
        every += judged
        shapes = " ".join(str(t.gpus) for t in scenario.trainers)
        needs = " ".join(str(a.need) for a in arrivals)
        lines.append(f"| {seed} | {shapes} | {needs} | {totals(judged)} |")
    lines += [
        f"| all | | {len(every)} arrivals | {totals(every)} |",
        "| total / without | | | " + " | ".join(ratio(every, k) for k in (*COLUMNS, None)) + " |",
        "| arrivals at the least possible | | | " + " | ".join(
            f"{sum(j.lost[k] <= j.least + 1e-6 for j in every)} of {len(every)}" for k in COLUMNS
        ) + " | |",
        "| median per arrival | | | " + " | ".join(
            f"{statistics.median(j.lost[k] if k else j.least for j in every):,.0f}"
            for k in (*COLUMNS, None)
        ) + " |",
    ]  # fmt: skip
    return "\n".join(lines)


def legend() -> str:
    """What each column of the tables assumes."""
    return "\n".join([
        "- lost: per victim, its gang's GPUs x the work a preemption loses given its save on "
        "notice and grace (the operator's measure, AtRisk), restart seconds 0",
        "- without boost: Kueue's own order within one priority (the most recently admitted "
        "first); one queue for both populations, as Kueue reads neither files nor grace",
        f"- default policy: priorityBoost enabled at its defaults (gpuSecondsPerPoint "
        f"{DEFAULT_PER_POINT}, maxBoost unset: the operator's --max-priority-boost {LIMIT}), "
        "minIntervalSeconds 1",
        f"- tuned policy: gpuSecondsPerPoint {TUNED_GPU_SECONDS_PER_POINT}, else the same",
        "- least possible: the cheapest set of the queue's jobs that frees the GPUs the "
        "arrival needs",
    ])  # fmt: skip


def totals(judged: list[Judged]) -> str:
    sums = [sum(j.lost[k] for j in judged) for k in COLUMNS] + [sum(j.least for j in judged)]
    return " | ".join(f"{v:,.0f}" for v in sums)


def ratio(judged: list[Judged], column: str | None) -> str:
    """A column's total loss (None: the least possible) over the total without the boost."""
    without = sum(j.lost["without"] for j in judged)
    total = sum(j.lost[column] if column else j.least for j in judged)
    return f"{total / without:.2f}" if without else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--arrivals", type=int, default=8, help="per seed, one at a time")
    args = parser.parse_args()
    started = time.monotonic()
    # The queues' GPUs and an arrival of up to 4 GPUs in each, on kwok nodes of 8 GPUs.
    nodes = (len(MODES) * (QUOTA + max(SHAPES)) + 7) // 8
    with bench_cluster("preempt", kwok_nodes=nodes) as bench:
        manager = testenv_kueue.start(bench.kubeconfig, bench.work / "kueue")
        scheduling = client.SchedulingV1Api(bench.api)
        scheduling.create_priority_class(client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=URGENT_CLASS), value=URGENT_VALUE))  # fmt: skip
        core, custom = client.CoreV1Api(bench.api), client.CustomObjectsApi(bench.api)
        pv = bind_claim(core, bench.namespace)
        volume = bench.work / "volume"
        volume.mkdir()
        # A pass reads the files at the operator's resync (30 s by default) or sooner.
        # The jobs' minIntervalSeconds of 1 holds only where the administrator's floor allows it.
        flags = ["--standalone", "--namespace", bench.namespace,
                 "--max-priority-boost", str(LIMIT), "--resync-seconds", "2",
                 "--min-boost-interval-seconds", "1"]  # fmt: skip
        operator = OperatorProcess(
            bench.kubeconfig, bench.namespace, bench.work / "operator.log", args=flags,
            RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}",
        )  # fmt: skip
        operator.start()
        try:
            kube = Kube(bench.api, bench.namespace)
            results = {}
            for number in args.seeds:
                scenario = draw(number, args.arrivals)
                queues = queues_for(custom, bench.namespace, number)
                results[number] = (scenario, Seed(scenario, kube, volume, queues).run())
            for population in POPULATIONS:
                print(table(population, results), end="\n\n")
            print(legend(), end="\n\n")
            print(f"{len(args.seeds)} seeds, {args.arrivals} arrivals each, "
                  f"in {time.monotonic() - started:.0f} s")  # fmt: skip
        finally:
            operator.stop()
            scheduling.delete_priority_class(URGENT_CLASS)
            core.delete_persistent_volume(pv)
            manager.down()


if __name__ == "__main__":
    main()
