"""`rljob operator`: run the controller (kopf underneath)."""

from __future__ import annotations

import argparse
import logging
import os
import random
import socket
import time

from .controller import RESYNC_SECONDS
from .reconcile.settings import (
    MAX_PRIORITY_BOOST,
    MIN_BOOST_INTERVAL_SECONDS,
    MIN_GPU_SECONDS_PER_POINT,
    SCHEDULER_WAIT_SECONDS,
    Settings,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("operator", help="run the RLTrainingJob operator")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", default=[], help="watch this namespace (repeatable)"
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--standalone", action="store_true", help="do not coordinate with other replicas (peering)"
    )
    parser.add_argument("--peering", default="rljob", help="peering object shared by replicas")
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority: of the live replicas, only the highest acts, the others wait "
        "(default: from the start time, so that the oldest replica acts; equal priorities "
        "make every replica wait)",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=60,
        help="seconds after its last keep-alive that a replica still counts as alive: "
        "the longest a waiting replica takes to step in for one that died",
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=RESYNC_SECONDS,
        help="how often every known job gets a pass from the cache, whether or not an event "
        f"came; it reads nothing from the API server (default {RESYNC_SECONDS:g})",
    )
    parser.add_argument(
        "--scheduler-wait-seconds",
        type=float,
        default=SCHEDULER_WAIT_SECONDS,
        help="how long a pod may wait for any scheduler to look at it (no PodScheduled "
        "condition, no node) before its job's PodsUnschedulable condition asks whether the "
        f"scheduler of its schedulerName runs (default {SCHEDULER_WAIT_SECONDS:g})",
    )
    parser.add_argument(
        "--max-priority-boost",
        type=int,
        default=MAX_PRIORITY_BOOST,
        help="the largest Kueue priority boost any job may have; a job's "
        "spec.queueing.priorityBoost.maxBoost above it is clamped, and its status says so. Keep "
        "it below the gap between your WorkloadPriorityClasses, so that no boost shields a job "
        f"from the next class up (default {MAX_PRIORITY_BOOST}: jobs get no boost)",
    )
    parser.add_argument(
        "--min-boost-interval-seconds",
        type=positive_int,
        default=MIN_BOOST_INTERVAL_SECONDS,
        help="the least spec.queueing.priorityBoost.minIntervalSeconds of any job: how often "
        "at most the operator reads a boosted job's checkpoint folder and patches its Kueue "
        "Workload; a job's value below it is raised to it, and its status says so "
        f"(default {MIN_BOOST_INTERVAL_SECONDS})",
    )
    parser.add_argument(
        "--min-gpu-seconds-per-point",
        type=positive_int,
        default=MIN_GPU_SECONDS_PER_POINT,
        help="the least spec.queueing.priorityBoost.gpuSecondsPerPoint of any job, so that no "
        "job reaches --max-priority-boost with a few GPU-seconds at risk; a job's value below "
        f"it is raised to it, and its status says so (default {MIN_GPU_SECONDS_PER_POINT})",
    )
    parser.add_argument(
        "--liveness", default=None, help="health endpoint, e.g. http://0.0.0.0:8081/healthz"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=8080, help="serve Prometheus /metrics here (0: off)"
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import kopf

    from . import handlers  # registers the handlers with kopf

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # kopf logs every handler call, once per watch event
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    priority = args.priority if args.priority is not None else start_priority()
    identity = own_identity()
    scope = handlers.Scope(
        namespaces=None if args.all_namespaces else (args.namespace or None),
        peering=None if args.standalone else handlers.Peering(args.peering, identity, priority),
        resync_seconds=args.resync_seconds,
        settings=Settings(
            args.scheduler_wait_seconds,
            args.max_priority_boost,
            args.min_boost_interval_seconds,
            args.min_gpu_seconds_per_point,
        ),
    )
    settings = kopf.OperatorSettings()
    settings.peering.lifetime = args.peering_lifetime
    kopf.run(
        clusterwide=args.all_namespaces,
        namespaces=args.namespace,
        standalone=args.standalone,
        peering_name=None if args.standalone else args.peering,
        priority=priority,
        identity=identity,
        liveness_endpoint=args.liveness,
        settings=settings,
        memo=kopf.Memo(scope=scope),
    )
    return 0


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def own_identity() -> str:
    """The name this replica's keep-alives go under: the pod's name where the chart sets
    POD_ID (as kopf itself would use it), else a name unique to this process."""
    pod = os.environ.get("POD_ID")
    return pod or f"{socket.gethostname()}-{os.getpid()}-{random.randrange(16**6):06x}"


def start_priority() -> int:
    """A peering priority that falls with the start time: the oldest replica keeps acting,
    and a replica that starts later (a rolling update, a rescheduled pod) waits instead of
    taking over. kopf pauses every replica of an equal priority, so the milliseconds get a
    random tail to keep two replicas started together apart."""
    return -(time.time_ns() // 1_000_000 * 1_000 + random.randrange(1_000))
