"""How far one reconcile pass wanders through the operator's files: one job key followed from
the work queue (Controller.process) through one pass, for three passes of a 2-pod job's life.

    .venv/bin/python benchmarks/pass_trace.py [--show]

A stop is each time the pass's thread moves from one of rljob's files (operator/, contract/)
to another, by a call or a return; code outside them (the standard library, the kubernetes
client) is walked through as if it were not there. "Returns" are the stops into a file the
pass had already left: stops minus the files entered. "Calls" are the stops made by a call, and
their repeats the calls into a file entered before. The passes, each traced alone on the
cache a full relist has just filled:
- create: the job was just made; the pass looks at the checkpoints and creates the gang;
- steady: the gang runs (kwok's nodes run it); a resync's pass that finds nothing to do;
- disruption: one pod is deleted (as the scheduler's preemption does); the pass records the
  end and deletes the gang.
Requests that a pass sends at once (kube.at_once) run on other threads, which are not traced.

A local control plane with two kwok GPU nodes; the checkpoint volume is a local folder the
operator reads in-process (a complete global_step_20 written as the trainer would).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from bench_cluster import bench_cluster  # noqa: E402
from kube_steps import bind_claim, wait_for  # noqa: E402
from kubernetes import client  # noqa: E402
from rljob_contract.manifest import write_manifest  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.controller import Controller  # noqa: E402
from rljob_operator.kube import Kube  # noqa: E402
from rljob_operator.reconcile.lookup.finder import CheckpointFinder  # noqa: E402

OURS = (str(REPO / "operator"), str(REPO / "contract"))


@dataclass
class Trace:
    """The files one thread enters, in order, counting only rljob's."""

    thread: int = field(default_factory=threading.get_ident)
    stops: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # the stops made by a call

    def at(self, frame: FrameType | None, call: bool) -> None:
        while frame is not None and not frame.f_code.co_filename.startswith(OURS):
            frame = frame.f_back
        if frame is None:
            return
        here = frame.f_code.co_filename
        if not self.stops or self.stops[-1] != here:
            self.stops.append(here)
            if call:
                self.calls.append(here)

    def profile(self, frame: FrameType, event: str, _: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        if event == "call":
            self.at(frame, True)
        elif event == "return":
            self.at(frame.f_back, False)

    @property
    def files(self) -> int:
        return len(set(self.stops))

    @property
    def returns(self) -> int:
        return len(self.stops) - self.files


def traced(run: Callable[[], None]) -> Trace:
    trace = Trace()
    sys.setprofile(trace.profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return trace


def write_checkpoint(root: Path, step: int) -> None:
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "__0_0.distcp").write_bytes(b"weights")
    (folder / "actor" / ".metadata").write_bytes(b"metadata")
    write_manifest(folder, step=step, world_size=2)


def job_body(nodes: list[str]) -> dict[str, Any]:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}}  # fmt: skip
    return {
        "apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": "traced"},
        "spec": {
            "image": "rljob-trainer:dev", "nnodes": 2,
            "resources": {"limits": {"nvidia.com/gpu": 8}},
            "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpts"}},
                           "directory": "run"},
            "template": {"spec": {"terminationGracePeriodSeconds": 0, "affinity": affinity}},
        },
    }  # fmt: skip


def report(name: str, trace: Trace, show: bool) -> None:
    print(f"{name:10} {len(trace.stops):4} stops in {trace.files:2} files, "
          f"{trace.returns:3} returns to a file already left; {len(trace.calls):3} calls into "
          f"another file, {len(trace.calls) - len(set(trace.calls)):3} of them into one "
          "entered before")  # fmt: skip
    if show:
        for path in trace.stops:
            print(f"    {Path(path).relative_to(REPO)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="list every stop")
    args = parser.parse_args()
    with bench_cluster("trace", kwok_nodes=2) as bench:
        volume = bench.work / "volume"
        write_checkpoint(volume / "run", 20)
        core = client.CoreV1Api(bench.api)
        volume_name = bind_claim(core, bench.namespace)
        nodes = [n.metadata.name for n in core.list_node().items if "gpu" in n.metadata.name]
        controller = Controller(Kube(bench.api), CheckpointFinder({"ckpts": volume}, "unused"),
                                [bench.namespace])  # fmt: skip
        key = (bench.namespace, "traced")

        def one_pass() -> None:
            controller.process(key)

        def trainers() -> list[client.V1Pod]:
            selector = f"{c.LABEL_JOB}=traced,{c.LABEL_ROLE}={c.ROLE_TRAINER}"
            return core.list_namespaced_pod(bench.namespace, label_selector=selector).items

        client.CustomObjectsApi(bench.api).create_namespaced_custom_object(
            c.GROUP, c.VERSION, bench.namespace, c.PLURAL, job_body(nodes)
        )
        controller.relist()
        report("create", traced(one_pass), args.show)

        def running() -> bool:
            pods = trainers()
            return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

        wait_for(running, 60, "the gang to run")
        controller.relist()
        one_pass()  # records that the gang runs
        controller.relist()
        report("steady", traced(one_pass), args.show)
        victim = trainers()[0].metadata.name
        core.delete_namespaced_pod(victim, bench.namespace)
        wait_for(lambda: any(p.metadata.deletion_timestamp for p in trainers()), 30,
                 "the deletion to show")  # fmt: skip
        controller.relist()
        report("disruption", traced(one_pass), args.show)
        core.delete_persistent_volume(volume_name)


if __name__ == "__main__":
    main()
