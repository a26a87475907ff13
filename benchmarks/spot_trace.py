"""Goodput under a real spot trace: rljob with and without save on notice, and JobSet, side by side.

A window of a public AWS preemption trace (benchmarks/traces/: 4 spot V100 nodes, their count
every 5 minutes) is replayed, compressed in time, on three pools of node agents, one per system;
each pool's size follows the trace. A drop is a node reclaimed with the cloud's notice (AWS gives
2 minutes, scaled like the ticks): the node gets the taint AWS's node termination handler puts
(`aws-node-termination-handler/spot-itn`, NoSchedule) and the annotation
`rljob.io/termination-time` with the moment it goes, as a handler that reads the instance's
metadata would set; at the tick it is deleted, and its pods' processes die at once (the node
agent's vanished machine). No handler drains it: a pod on it gets no SIGTERM. A rise is a new
node. When the trace drops, the node taken is one that runs a pod of the system's job where
there is one (every reclaim hits the job when it can), else an idle one.

Each pool runs one 2-pod job of rljob's own GRPO trainer (torchrun, the tests' tiny model, each
rollout slowed by a sleep to stand for a real step: `--rollout-seconds`), saving every
`--save-interval` steps:

- rljob: an RLTrainingJob; on the taint rljob asks the gang to save (its checkpoint request),
  the gang saves at its next step and stops, and the next gang starts on nodes that stay;
- rljob-periodic: the same with save on notice off (the trainer told to ignore the request:
  `runner.checkpoint_request_file=null`): it resumes from its last periodic save;
- jobset: a JobSet with the preemption recipe of benchmarks/peers.py (the Job fails on
  DisruptionTarget, RestartJobSetAndIgnoreMaxRestarts on PodFailurePolicy), plus maxRestarts
  for the gang's other pod, which crashes on the broken collective; the trainer resumes from
  its own newest checkpoint.

The three run at once, each on its own pool, and meet the same reclaims at the same moments.
The window starts once every job has trained a step or two (the trace meets running jobs, as
a long job meets a stretch of it), and every figure is of the window alone.

Every system is measured with one ruler (rljob_testenv.goodput_ruler), from a watch on the
pods and the steps each gang's rank 0 logged, never from a system's own status: productive
seconds, goodput over the wall and over the time the trace had enough nodes, lost steps, and
the causes of the rest. It writes a plot per system (nodes, job phase, step over time) and
projects the window to the trace's real tick from the measured cost of each phase.

    .venv/bin/python benchmarks/spot_trace.py --trace FILE --start TICK --ticks N \
        --tick-seconds S [--systems rljob rljob-periodic jobset] [--out DIR]
    .venv/bin/python benchmarks/spot_trace.py --trace FILE --ticks N --list-windows

The last line is JSON: {"systems": {"rljob": {"goodput", "lost_steps", "productive_s",
"wall_s", ...}, ...}, "reclaims": N}. Builds JobSet first if it is not cached (as `rljob
testenv install --peers` does, a few minutes once).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from bench_cluster import bench_cluster, say  # noqa: E402
from kube_steps import bind_claim  # noqa: E402
from kubernetes import client, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from rljob_nodeagent import AgentPool, claim_dir  # noqa: E402
from rljob_nodeagent.agent import DEFAULT_SHAPE  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.preemption.nodes import TERMINATION_TAINTS  # noqa: E402
from rljob_testenv import binaries  # noqa: E402
from rljob_testenv.goodput_ruler import (  # noqa: E402
    TICK_BOUND,
    Attempt,
    Cause,
    Projection,
    Ruling,
    lost_steps,
    project,
    rule,
)
from rljob_testenv.operator_process import OperatorProcess  # noqa: E402
from rljob_testenv.peers import JobSetController  # noqa: E402
from rljob_testenv.ports import free_port  # noqa: E402
from rljob_testenv.scenario import read_progress  # noqa: E402
from rljob_testenv.spot import (  # noqa: E402
    Change,
    NodeChange,
    Window,
    find_windows,
    load_trace,
    node_changes,
    notice_seconds,
    window,
    window_problems,
)
from rljob_trainer.faults import ENV_TEST_SLOW_ROLLOUT_TOKEN  # noqa: E402
from tiny_trainer import TINY  # noqa: E402
from urllib3.exceptions import HTTPError, ProtocolError  # noqa: E402

SYSTEMS = ("rljob", "rljob-periodic", "jobset")
DEFAULT_TRACE = REPO / "benchmarks" / "traces" / "aws-4node-2023-08-03-us-east-2a_v100_1.json"
GANG = 2  # pods of every job, one per node
GRACE_SECONDS = 30  # every system's pods
ROLLOUT_TOKENS = 3  # the tiny config's algorithm.max_new_tokens: a rollout's sampled tokens
WARM_UP_STEPS = 2  # every job has trained this many steps when the window starts
WARM_UP_TIMEOUT = 300
BENCH_LABEL = "bench.rljob.io/system"
POOL_LABEL = "bench.rljob.io/pool"
SPOT_TAINT = "aws-node-termination-handler/spot-itn"
JOBSET_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOB_INDEX = "batch.kubernetes.io/job-completion-index"
# What rank 0 logs (rljob_trainer): a step finished, a save sealed.
STEP_LINE = re.compile(r"^\[rank0\] (\S+ \S+) INFO rljob_trainer\.train: step (\d+)/")
STOP_LINE = re.compile(r"^\[rank0\] \S+ \S+ WARNING rljob_trainer\.train: stopping on request")
SAVE_LINE = re.compile(
    r"^\[rank0\] (\S+ \S+) INFO rljob_trainer\.checkpoint: saved checkpoint \S*global_step_(\d+)$"
)
assert SPOT_TAINT in TERMINATION_TAINTS  # the sign rljob reads (preemption/nodes.py)


# ---------------------------------------------------------------------------- the jobs
def trainer_args(system: str, save_interval: int | None) -> list[str]:
    """What every system's trainer runs: the tests' tiny model, no end in sight."""
    args = [f"runner.output_dir=/checkpoints/{system}", *TINY, "runner.max_steps=1000000"]
    if save_interval is not None:
        args.append(f"runner.save_interval={save_interval}")
    if system == "rljob-periodic":
        args.append("runner.checkpoint_request_file=null")  # save on notice off
    return args


def rljob_job(system: str, save_interval: int) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": system},
        "spec": {
            "framework": "rljob",
            "image": "rljob-trainer:dev",
            "nnodes": GANG,
            "nprocPerNode": 1,
            "rendezvousPort": free_port(),
            "args": trainer_args(system, None),
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "checkpoint": {
                "volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                "mountPath": "/checkpoints",
                "directory": f"{system}/grpo_tiny/checkpoints",
                "saveInterval": save_interval,
                "maxToKeep": 3,
                "resume": "auto",
            },
            "restartPolicy": {"maxFailures": 100},
            "template": {
                "metadata": {"labels": {BENCH_LABEL: system}},
                "spec": {
                    "terminationGracePeriodSeconds": GRACE_SECONDS,
                    "nodeSelector": {POOL_LABEL: system},
                },
            },
        },
    }


def jobset_job(namespace: str, save_interval: int) -> dict[str, Any]:
    """benchmarks/peers.py's recipe around the same trainer under torchrun, rank 0's address
    from the JobSet's headless Service (the node agents resolve it to this machine)."""
    name, port = "jobset", free_port()
    master = f"{name}-workers-0-0.{name}.{namespace}.svc"
    env = [
        {
            "name": "NODE_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX}']"}},
        },
        *(
            {"name": k, "value": v}
            for k, v in {
                "MASTER_ADDR": master,
                "MASTER_PORT": str(port),
                "PET_MASTER_ADDR": master,
                "PET_MASTER_PORT": str(port),
                "PET_NNODES": str(GANG),
                "PET_NODE_RANK": "$(NODE_INDEX)",
                "PET_NPROC_PER_NODE": "1",
                "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(GRACE_SECONDS - 10),
            }.items()
        ),
    ]
    pod = {
        "metadata": {"labels": {BENCH_LABEL: name}},
        "spec": {
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "restartPolicy": "Never",
            "nodeSelector": {POOL_LABEL: name},
            "volumes": [{"name": "ckpts", "persistentVolumeClaim": {"claimName": "ckpts"}}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "rljob-trainer:dev",
                    "command": [
                        "torchrun",
                        "-m",
                        "rljob_trainer",
                        *trainer_args(name, save_interval),
                    ],
                    "env": env,
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "volumeMounts": [{"name": "ckpts", "mountPath": "/checkpoints"}],
                }
            ],
        },
    }
    job = {
        "parallelism": GANG,
        "completions": GANG,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        },
        "template": pod,
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {
                "maxRestarts": 100,
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


def create_job(custom: client.CustomObjectsApi, namespace: str, system: str, interval: int) -> None:
    if system == "jobset":
        custom.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset_job(namespace, interval)
        )
    else:
        custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, rljob_job(system, interval)
        )


def attempt_and_rank(system: str, labels: dict[str, str]) -> tuple[str, str]:
    if system == "jobset":
        return labels.get(JOBSET_ATTEMPT, "?"), labels.get(JOB_INDEX, "?")
    return labels.get(c.LABEL_ATTEMPT, "?"), labels.get(c.LABEL_NODE_RANK, "?")


# ---------------------------------------------------------------------------- the nodes
@dataclass
class Node:
    name: str
    pool: AgentPool
    tainted_at: float | None = None
    gone_at: float | None = None
    going_at_tick: int | None = None  # the tick at whose start it goes


class TracePool:
    """One system's nodes, whose count follows the trace; each a node agent of 1 GPU."""

    def __init__(
        self,
        system: str,
        kubeconfig: Path,
        root: Path,
        core: client.CoreV1Api,
        rollout_seconds: float,
    ) -> None:
        self.system, self.kubeconfig, self.root, self.core = system, kubeconfig, root, core
        token = {ENV_TEST_SLOW_ROLLOUT_TOKEN: f"{rollout_seconds / ROLLOUT_TOKENS:.4f}"}
        self.extra_env = lambda pod: token
        self.nodes: dict[str, Node] = {}
        self.lock = threading.Lock()
        self.made = 0
        self.capacity: list[tuple[float, int]] = []  # (when, nodes that take pods)
        self.alive: list[tuple[float, int]] = []  # (when, nodes alive)
        self.starting: list[threading.Thread] = []

    def _record(self) -> None:
        now = time.time()
        with self.lock:
            alive = [n for n in self.nodes.values() if n.gone_at is None]
            free = [n for n in alive if n.tainted_at is None]
        self.capacity.append((now, len(free)))
        self.alive.append((now, len(alive)))

    def add(self, count: int, wait: bool) -> None:
        """`count` new nodes; Ready before this returns where `wait`, else in the background."""
        names = []
        for _ in range(count):
            names.append(f"{self.system}-{self.made}")
            self.made += 1

        def start(name: str) -> None:
            pool = AgentPool(
                self.kubeconfig,
                self.root,
                [name],
                replace(DEFAULT_SHAPE, gpus=1),
                labels={POOL_LABEL: self.system},
                extra_env=self.extra_env,
                heartbeat_seconds=5,
            )
            pool.start()
            with self.lock:
                self.nodes[name] = Node(name, pool)
            self._record()

        threads = [threading.Thread(target=start, args=(n,), daemon=True) for n in names]
        for thread in threads:
            thread.start()
        self.starting += threads
        if wait:
            for thread in threads:
                thread.join(90)

    def notice(self, count: int, tick: int, busy: set[str], going_at: datetime) -> list[str]:
        """Tell `count` nodes they go at the start of `tick`: the ones running the job's pods
        first (`busy`), then by name."""
        with self.lock:
            candidates = sorted(
                (n for n in self.nodes.values() if n.gone_at is None and n.tainted_at is None),
                key=lambda n: (n.name not in busy, n.name),
            )
        chosen = candidates[:count]
        for node in chosen:
            node.tainted_at, node.going_at_tick = time.time(), tick
            taint = {"key": SPOT_TAINT, "value": "spot-itn", "effect": "NoSchedule"}
            body = {
                "metadata": {
                    "annotations": {
                        c.NODE_TERMINATION_TIME: going_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                    }
                },
                "spec": {"taints": [taint]},
            }
            self.core.patch_node(node.name, body)
        self._record()
        return [n.name for n in chosen]

    def gone(self, tick: int) -> list[str]:
        """The nodes told they go at the start of `tick` go: deleted, their processes killed
        (the node agent's vanished machine)."""
        with self.lock:
            going = [n for n in self.nodes.values() if n.going_at_tick == tick and not n.gone_at]
        for node in going:
            node.gone_at = time.time()
            with contextlib.suppress(ApiException):
                self.core.delete_node(node.name)
        self._record()
        return [n.name for n in going]

    def node_gone_at(self, name: str) -> float | None:
        node = self.nodes.get(name)
        return node.gone_at if node else None

    def node_tainted_at(self, name: str) -> float | None:
        node = self.nodes.get(name)
        return node.tainted_at if node else None

    def stop(self) -> None:
        for thread in self.starting:
            thread.join(30)
        for node in self.nodes.values():
            node.pool.stop(grace=2)


class AgentLog:
    """The node agents' own log (a node vanishing, ...) in a file, not on the console."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(path)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.logger = logging.getLogger("rljob_nodeagent")
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False

    def stop(self) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = True
        self.handler.close()


# ---------------------------------------------------------------------------- the pods
@dataclass
class PodSeen:
    name: str
    system: str
    attempt: str
    rank: str
    seen_at: float
    node: str | None = None
    bound_at: float | None = None
    running_at: float | None = None
    stopped_at: float | None = None  # Succeeded or Failed, or gone


@dataclass
class PodWatch:
    """Every job pod of the namespace, from one watch: when each came, was placed, ran, ended."""

    core: client.CoreV1Api
    namespace: str
    pods: dict[str, PodSeen] = field(default_factory=dict)  # by uid
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()

    def _run(self) -> None:
        follow = watch.Watch()
        while not self.stopping.is_set():
            known = follow.resource_version
            try:
                for event in follow.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    label_selector=BENCH_LABEL,
                    timeout_seconds=300,
                    **({"resource_version": known} if known else {}),
                ):
                    if self.stopping.is_set():
                        return
                    self._seen(event["type"], event["object"], time.time())
            except (ProtocolError, HTTPError, client.ApiException) as exc:
                if getattr(exc, "status", None) == 410:
                    follow.resource_version = None
                time.sleep(0.5)

    def _seen(self, kind: str, pod: Any, now: float) -> None:
        labels = pod.metadata.labels or {}
        system = labels.get(BENCH_LABEL, "?")
        attempt, rank = attempt_and_rank(system, labels)
        with self.lock:
            seen = self.pods.setdefault(
                pod.metadata.uid, PodSeen(pod.metadata.name, system, attempt, rank, now)
            )
            if pod.spec.node_name and seen.bound_at is None:
                seen.node, seen.bound_at = pod.spec.node_name, now
            phase = pod.status.phase or "Pending"
            if phase == "Running" and seen.running_at is None:
                seen.running_at = now
            if (kind == "DELETED" or phase in ("Succeeded", "Failed")) and seen.stopped_at is None:
                seen.stopped_at = now

    def of(self, system: str) -> list[PodSeen]:
        with self.lock:
            return [p for p in self.pods.values() if p.system == system]

    def busy_nodes(self, system: str) -> set[str]:
        """The nodes where a pod of the system's job is placed and has not stopped."""
        return {p.node for p in self.of(system) if p.node and p.stopped_at is None}


def logged(log: Path, line: re.Pattern[str]) -> tuple[tuple[int, float], ...]:
    """(step, when) of every `line` in rank 0's log: the trainer's own record of its steps
    and saves."""
    found = []
    with contextlib.suppress(OSError):
        for text in log.read_text(errors="replace").splitlines():
            if match := line.match(text):
                moment = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                found.append((int(match[2]), moment))
    return tuple(found)


def stopped_on_request(log: Path) -> bool:
    """Whether rank 0 said it stopped on a notice (saved, or with no time to): the trainer's
    word, which reaches the pod's status only as torchrun's exit 1 and a message."""
    with contextlib.suppress(OSError):
        return any(STOP_LINE.match(text) for text in log.read_text(errors="replace").splitlines())
    return False


def attempts_of(system: str, pods: list[PodSeen], pool: TracePool, logs: Path) -> list[Attempt]:
    """Each gang of the system as the watch saw it, with the steps its rank 0 logged."""
    gangs: dict[str, list[PodSeen]] = {}
    for pod in pods:
        gangs.setdefault(pod.attempt, []).append(pod)
    found = []
    for key, gang in gangs.items():
        gang = sorted(gang, key=lambda p: p.seen_at)[:GANG]
        bound = [p.bound_at for p in gang if p.bound_at is not None]
        ran = [p.running_at for p in gang if p.running_at is not None]
        ends = [p.stopped_at for p in gang if p.stopped_at is not None]
        ends += [
            t
            for p in gang
            if p.node
            and (t := pool.node_gone_at(p.node)) is not None
            and p.bound_at is not None
            and t >= p.bound_at
        ]
        ended = min(ends, default=None)
        notices = [
            t
            for p in gang
            if p.node
            and (t := pool.node_tainted_at(p.node)) is not None
            and t >= min(p.seen_at for p in gang)
            and (ended is None or t <= ended)
        ]
        rank0 = next((p for p in gang if p.rank == "0"), None)
        found.append(
            Attempt(
                f"{system} {key}",
                min(p.seen_at for p in gang),
                max(bound) if len(bound) == GANG else None,
                max(ran) if len(ran) == GANG else None,
                ended,
                logged(logs / f"{rank0.name}.log", STEP_LINE) if rank0 else (),
                logged(logs / f"{rank0.name}.log", SAVE_LINE) if rank0 else (),
                bool(rank0) and stopped_on_request(logs / f"{rank0.name}.log"),
                min(notices, default=None),
            )
        )
    return sorted(found, key=lambda a: a.created)


# ---------------------------------------------------------------------------- the run
@dataclass
class Result:
    system: str
    attempts: list[Attempt]
    ruling: Ruling
    projection: Projection
    capacity: list[tuple[float, int]]
    alive: list[tuple[float, int]]


def run(args: argparse.Namespace, w: Window, trace_tick: float, out: Path) -> dict[str, Result]:
    notice = notice_seconds(args.tick_seconds, trace_tick)
    changes = node_changes(w, args.tick_seconds, notice)
    needed = {b for component in binaries.COMPONENTS for b in component.commands}
    if "jobset" in args.systems:
        needed.add("jobset-manager")  # not training-operator, which --peers builds beside it
    binaries.install(needed, say=say, peers="jobset" in args.systems)
    started: list[Any] = []
    with bench_cluster("spot", args.cluster) as bench:
        try:
            core, custom = client.CoreV1Api(bench.api), client.CustomObjectsApi(bench.api)
            pv = bind_claim(core, bench.namespace)
            root = out / "agents"
            started.append(AgentLog(root / "nodeagent.log"))
            volume = claim_dir(root, bench.namespace, "ckpts")
            volume.mkdir(parents=True, exist_ok=True)
            say(f"node pools: {w.counts[0]} nodes each to start ({', '.join(args.systems)})")
            pools = {
                s: TracePool(s, bench.kubeconfig, root, core, args.rollout_seconds)
                for s in args.systems
            }
            started += pools.values()
            for pool in pools.values():
                pool.add(w.counts[0], wait=False)
            for pool in pools.values():
                for thread in pool.starting:
                    thread.join(90)
            if any(s.startswith("rljob") for s in args.systems):
                operator = OperatorProcess(
                    bench.kubeconfig,
                    bench.namespace,
                    out / "rljob-operator.log",
                    RLJOB_CHECKPOINT_VOLUMES=f"ckpts={volume}",
                )
                operator.start()
                started.append(operator)
            if "jobset" in args.systems:
                jobset = JobSetController(bench.kubeconfig, out)
                jobset.up()
                started.append(jobset)
            pods = PodWatch(core, bench.namespace)
            pods.start()
            started.append(pods)
            created = time.time()
            for system in args.systems:
                create_job(custom, bench.namespace, system, args.save_interval)
            warm_up(args.systems, volume, created)
            t0 = time.time()
            say(
                f"replaying ticks {w.start}..{w.start + w.ticks - 1} at {args.tick_seconds:g} s "
                f"a tick, notice {notice:g} s"
            )
            replay(changes, pools, pods, t0, args.tick_seconds, w, volume)
            t_end = t0 + w.ticks * args.tick_seconds
            say("window over: reading the trainers' logs")
            results = {}
            for system in args.systems:
                attempts = attempts_of(
                    system, pods.of(system), pools[system], root / "logs" / bench.namespace
                )
                capacity = sorted(pools[system].capacity)
                ruling = rule(attempts, t0, t_end, capacity, GANG)
                projection = project(
                    ruling.seconds(), args.tick_seconds, trace_tick, w.ticks, w.enough_ticks(GANG)
                )
                results[system] = Result(
                    system,
                    attempts,
                    ruling,
                    projection,
                    capacity,
                    sorted(pools[system].alive),
                )
            core.delete_persistent_volume(pv)
            keep_observations(results, out / "observed.json")
            return results
        finally:
            for thing in reversed(started):
                thing.stop()


def keep_observations(results: dict[str, Result], path: Path) -> None:
    """What the ruler read, to check a report against: each gang and the pools' nodes."""
    path.write_text(json.dumps({
        system: {
            "window": [r.ruling.start, r.ruling.end],
            "attempts": [asdict(a) for a in r.attempts],
            "nodes_taking_pods": r.capacity,
            "nodes_alive": r.alive,
        }
        for system, r in results.items()
    }, indent=1))  # fmt: skip


def warm_up(systems: list[str], volume: Path, since: float) -> None:
    """Until every job has trained WARM_UP_STEPS steps: the window meets jobs that run, as a
    long job meets a stretch of the trace, not jobs that start with it."""
    deadline = since + WARM_UP_TIMEOUT
    while time.time() < deadline:
        steps = {s: progress_step(volume, s) for s in systems}
        if all(step.isdigit() and int(step) >= WARM_UP_STEPS for step in steps.values()):
            say(f"jobs created and running after {time.time() - since:.0f} s ({steps})")
            return
        time.sleep(0.5)
    raise RuntimeError(f"not every job trained {WARM_UP_STEPS} steps in {WARM_UP_TIMEOUT} s")


def replay(
    changes: list[NodeChange],
    pools: dict[str, TracePool],
    pods: PodWatch,
    t0: float,
    tick_seconds: float,
    w: Window,
    volume: Path,
) -> None:
    """Apply the trace's changes at their moments; a line per tick with each job's step."""
    moments = sorted(
        [(t0 + ch.at, 0, ch) for ch in changes]
        + [(t0 + i * tick_seconds, 1, i) for i in range(1, w.ticks + 1)],
        key=lambda m: (m[0], m[1]),
    )
    for at, kind, what in moments:
        time.sleep(max(0.0, at - time.time()))
        now = time.time() - t0
        if kind == 1:
            steps = ", ".join(f"{s} step {progress_step(volume, s)}" for s in pools)
            count = w.counts[what] if what < w.ticks else "-"
            say(f"[{now:6.1f}s] tick {what}/{w.ticks} (trace: {count} nodes): {steps}")
            continue
        for system, pool in pools.items():
            if what.change is Change.NOTICE:
                going = datetime.fromtimestamp(t0 + what.tick * tick_seconds, UTC)
                names = pool.notice(what.count, what.tick, pods.busy_nodes(system), going)
                say(
                    f"[{now:6.1f}s] {system}: {', '.join(names)} told to go at "
                    f"{what.tick * tick_seconds:.0f}s"
                )
            elif what.change is Change.GONE:
                say(f"[{now:6.1f}s] {system}: {', '.join(pool.gone(what.tick)) or '-'} gone")
            else:
                pool.add(what.count, wait=False)
                say(f"[{now:6.1f}s] {system}: {what.count} node(s) back")


def progress_step(volume: Path, system: str) -> str:
    """The last step in the trainer's progress.json (for the live view only)."""
    return str(
        (read_progress(volume / system / "grpo_tiny" / "checkpoints") or {}).get("step", "-")
    )


# ---------------------------------------------------------------------------- the report
CAUSE_COLORS = {
    Cause.WAITING_FOR_NODES: "#bbbbbb",
    Cause.WAITING: "#ff9f40",
    Cause.POD_START: "#ffd54f",
    Cause.FRAMEWORK_START: "#9575cd",
    Cause.TRAINED_AGAIN: "#e53935",
    Cause.STOPPING: "#4fc3f7",
    Cause.PRODUCTIVE: "#43a047",
}


GANG_COLORS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:cyan",
)  # no red


def summary(result: Result, w: Window, tick_seconds: float, notice: float) -> dict[str, Any]:
    ruling = result.ruling
    enough = w.enough_ticks(GANG) * tick_seconds
    seconds = ruling.seconds()
    return {
        "goodput": round(ruling.productive / ruling.wall, 4),
        "goodput_enough_nodes": round(ruling.productive / enough, 4) if enough else None,
        "lost_steps": ruling.lost_steps,
        "productive_s": round(ruling.productive, 1),
        "wall_s": round(ruling.wall, 1),
        "last_step": max((s for a in result.attempts for s, _ in a.steps), default=0),
        "interruptions": len(ruling.interruptions),
        "lost_where_notice_covered": sum(
            i.lost_steps
            for i in ruling.interruptions
            if i.noticed is not None and i.covered(notice)
        ),
        "causes_s": {str(k): round(v, 1) for k, v in seconds.items()},
        "projected_goodput": round(result.projection.goodput, 4),
        "projected_goodput_enough_nodes": round(result.projection.goodput_enough, 4),
    }


def report(
    results: dict[str, Result],
    w: Window,
    args: argparse.Namespace,
    trace_tick: float,
    notice: float,
    out: Path,
    reclaims: int,
) -> dict[str, Any]:
    summaries = {s: summary(r, w, args.tick_seconds, notice) for s, r in results.items()}
    enough = w.enough_ticks(GANG)
    print(
        f"\nwindow: ticks {w.start}..{w.start + w.ticks - 1} of {Path(args.trace).name} "
        f"({w.ticks} ticks of {trace_tick:g} s, here {args.tick_seconds:g} s each; notice "
        f"{notice:g} s); nodes {list(w.counts)}; {reclaims} reclaims; {enough} ticks with "
        f"{GANG}+ nodes ({enough * args.tick_seconds:g} s)"
    )
    print(
        f"every system: a {GANG}-pod job of rljob's trainer, a save every {args.save_interval} "
        f"steps, rollouts slowed to {args.rollout_seconds:g} s"
    )
    columns = (("goodput", 9), ("enough", 9), ("productive", 12), ("lost steps", 12))
    header = (
        f"{'system':<16}"
        + "".join(f"{n:>{width}}" for n, width in columns)
        + f"{'last step':>11}{'stops':>7}"
    )
    print("\n" + header)
    for system, s in summaries.items():
        print(
            f"{system:<16}{s['goodput']:>9.1%}{s['goodput_enough_nodes'] or 0:>9.1%}"
            f"{s['productive_s']:>11.1f}s{s['lost_steps']:>12}{s['last_step']:>11}"
            f"{s['interruptions']:>7}"
        )
    print(f"(goodput: productive over the wall; enough: over the time the trace had {GANG}+ nodes)")
    print("\nwhere the wall went, seconds (share):")
    for system, result in results.items():
        seconds, wall = result.ruling.seconds(), result.ruling.wall
        print(
            f"  {system:<16}"
            + ", ".join(f"{cause} {v:.1f} ({v / wall:.0%})" for cause, v in seconds.items())
        )
    print("\neach gang's end (seconds from the start; noticed: how long before it ended):")
    for system, result in results.items():
        t0 = result.ruling.start
        for i in result.ruling.interruptions:
            told = f"noticed {i.ended - i.noticed:4.1f}s before" if i.noticed else "no notice"
            step = f"{i.longest_step:.2f}s" if i.longest_step is not None else "-"
            fits = "covered" if i.noticed and i.covered(notice) else "not covered"
            print(
                f"  {system:<16} {i.attempt.split()[-1]:>3} ended {i.ended - t0:6.1f}  {told}, "
                f"last step {i.last_step}, next gang resumed after {i.resumed_after}, "
                f"{i.lost_steps} lost; longest step {step}: {fits} by the {notice:g} s "
                "notice"
            )
    print(
        f"\nprojection to the trace's real tick ({trace_tick:g} s, "
        f"x{trace_tick / args.tick_seconds:g}):"
        " waiting for nodes, steps and lost work stretch with the tick; waiting with nodes "
        "free, pod start, framework start and stopping cost what they cost here"
    )
    for system, result in results.items():
        p, restarts = result.projection, len(result.ruling.interruptions) or 1
        fixed = sum(v for k, v in p.seconds.items() if k not in TICK_BOUND)
        print(
            f"  {system:<16} goodput {p.goodput:.1%} of {p.wall / 3600:.1f} h, "
            f"{p.goodput_enough:.1%} of the {p.enough / 3600:.2f} h with enough nodes; restarts "
            f"{fixed:.0f} s ({fixed / restarts:.0f} s each), steps trained again "
            f"{p.seconds[Cause.TRAINED_AGAIN]:.0f} s, waiting for nodes "
            f"{p.seconds[Cause.WAITING_FOR_NODES]:.0f} s"
        )
    plots = [plot(r, w, args.tick_seconds, out) for r in results.values()]
    print(f"\nplots: {', '.join(str(p) for p in plots)}")
    return summaries


def plot(result: Result, w: Window, tick_seconds: float, out: Path) -> Path:
    """Nodes alive (the trace, and the pool's that take pods), the job's phase, its steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ruling = result.ruling
    t0 = ruling.start
    fig, axes = plt.subplots(
        3, 1, figsize=(11, 7.5), sharex=True, gridspec_kw={"height_ratios": [1.2, 0.6, 3]}
    )
    ticks = [i * tick_seconds for i in range(w.ticks + 1)]
    axes[0].step(
        ticks,
        [*w.counts, w.counts[-1]],
        where="post",
        color="black",
        lw=1.5,
        label="nodes alive (trace)",
    )
    for series, label, style in (
        (result.alive, "alive (pool)", ":"),
        (result.capacity, "taking pods (pool: not told to go)", "--"),
    ):
        xs = [t - t0 for t, _ in series] + [w.ticks * tick_seconds]
        ys = [n for _, n in series] + [series[-1][1] if series else 0]
        axes[0].step(xs, ys, where="post", ls=style, lw=1.2, label=label)
    axes[0].set_ylabel("nodes")
    axes[0].set_ylim(-0.3, max(w.counts) + 0.5)
    axes[0].legend(loc="lower left", fontsize=7)
    for segment in result.ruling.segments:
        axes[1].axvspan(
            segment.start - t0, segment.end - t0, color=CAUSE_COLORS[segment.cause], lw=0
        )
    axes[1].set_yticks([])
    axes[1].set_ylabel("phase")
    handles = [plt.Rectangle((0, 0), 1, 1, color=CAUSE_COLORS[k]) for k in Cause]
    axes[1].legend(
        handles,
        [str(k) for k in Cause],
        loc="upper center",
        ncol=4,
        fontsize=7,
        bbox_to_anchor=(0.5, -0.05),
    )
    attempts = sorted(result.attempts, key=lambda a: a.created)
    lost_by_attempt = lost_steps(attempts, ruling.end)
    for index, (attempt, lost) in enumerate(zip(attempts, lost_by_attempt, strict=True)):
        xs = [t - t0 for _, t in attempt.steps]
        ys = [s for s, _ in attempt.steps]
        color = GANG_COLORS[index % len(GANG_COLORS)]
        axes[2].plot(xs, ys, lw=1.2, marker=".", ms=2, color=color)
        again = [(t - t0, s) for s, t in attempt.steps if s in lost]
        if again:
            axes[2].plot(*zip(*again, strict=True), "x", color="red", ms=4)
    axes[2].set_ylabel("step (rank 0's log)")
    axes[2].set_xlabel("seconds from the window's start")
    axes[2].grid(alpha=0.3)
    for ax in axes:
        ax.set_xlim(0, ruling.wall)
        for segment in result.ruling.interruptions:
            ax.axvline(segment.ended - t0, color="red", ls=":", lw=0.8)
    fig.suptitle(
        f"{result.system}: goodput {ruling.productive / ruling.wall:.1%} of "
        f"{ruling.wall:.0f} s, {ruling.lost_steps} steps trained again "
        "(red x), gangs' ends dotted",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / f"{result.system}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def verdict(summaries: dict[str, dict[str, Any]]) -> None:
    if "rljob" not in summaries:
        return
    mine = summaries["rljob"]
    print(
        f"\nrljob lost {mine['lost_where_notice_covered']} steps where the notice covered a "
        f"step and its save ({mine['lost_steps']} in all)"
    )
    for other in ("rljob-periodic", "jobset"):
        if other in summaries:
            theirs = summaries[other]["goodput"]
            print(
                f"rljob's goodput {mine['goodput']:.1%} against {other}'s {theirs:.1%}: "
                f"{'higher' if mine['goodput'] > theirs else 'NOT higher'}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="a trace file")
    parser.add_argument("--start", type=int, default=1757, help="the window's first tick")
    parser.add_argument("--ticks", type=int, default=18, help="the window's length in ticks")
    parser.add_argument(
        "--tick-seconds", type=float, default=30.0, help="seconds each tick lasts here"
    )
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--save-interval", type=int, default=20, help="every system's periodic save, in steps"
    )
    parser.add_argument(
        "--rollout-seconds",
        type=float,
        default=1.5,
        help="a sleep in each step's rollout, standing for a real one",
    )
    parser.add_argument("--out", type=Path, help="plots and logs (default: a new temp folder)")
    parser.add_argument("--cluster", help="use this running `rljob testenv` cluster")
    parser.add_argument(
        "--list-windows",
        action="store_true",
        help="print the trace's best windows of --ticks ticks and stop",
    )
    args = parser.parse_args()
    trace = load_trace(args.trace)
    if args.list_windows:
        for fit in find_windows(trace, args.ticks, GANG)[:10]:
            print(
                f"--start {fit.start}: {fit.reclaims} reclaims, {GANG}+ nodes in "
                f"{fit.enough_ticks(GANG)} of {fit.ticks} ticks: {list(fit.counts)}"
            )
        return 0
    w = window(trace, args.start, args.ticks)
    for problem in window_problems(w, GANG):
        say(f"note: this window has {problem}")
    out = (args.out or Path(tempfile.mkdtemp(prefix="rljob-spot-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    say(f"output folder: {out}")
    started = time.monotonic()
    notice = notice_seconds(args.tick_seconds, trace.tick_seconds)
    results = run(args, w, trace.tick_seconds, out)
    summaries = report(results, w, args, trace.tick_seconds, notice, out, w.reclaims)
    verdict(summaries)
    print(f"run took {timedelta(seconds=round(time.monotonic() - started))}")
    print(json.dumps({"systems": summaries, "reclaims": w.reclaims}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
