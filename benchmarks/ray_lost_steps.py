"""Steps lost per preemption of RLinf- and verl-shaped Ray jobs, against how much of the grace
period the rest of a step and a save need, with rljob's save on notice and without it
(spec.saveOnNotice false: the driver is stopped at once, as before the bridge), in one run.

Each round runs, for each framework (verl's V1 trainer, its legacy trainer, RLinf) and each
setting, the e2e tests' Ray job (a 2-pod Ray gang on node agents, tests/e2e/ray_trainer.py:
the frameworks' own checkpoint managers and step-end decisions) with a save every SAVE_EVERY
steps, waits until its loop reports step `at` (the same, random between two saves, for all
the jobs of a round), and has the scheduler preempt its worker pod. With the save on notice,
the save it makes is slowed by 0, 4 or 20 s (the stand-in's `seconds_per_deadline_save`), so
that a step (about 1 s) and the save take about 0.1, 0.4 or 1.8 of the 12 s grace period. It
reports what the job's status says of the recovery: the last finished step, the step it
resumed from, the steps lost, and the recovery's time from detection to the new gang Running.

    .venv/bin/python benchmarks/ray_lost_steps.py [--rounds 1] [--seed 7]

Node agents play the kubelets (pods are local processes); the steps are the stand-in's
(1 s of sleep and a tiny FSDP2 step over gloo), so the figures count steps, not GPU time.
The slow saves are the stand-in's pauses inside saves made on notice: the bridge measures
only the periodic saves, which are fast, so the head's early judgement that a save cannot
fit (docs/frameworks.md) does not act here, and the head waits for the grace period.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from bench_cluster import bench_cluster, say  # noqa: E402
from e2e_steps import (  # noqa: E402
    CLAIM,
    POOL_LABEL,
    create_job,
    delete_pods,
    running_gang,
    wait_succeeded,
)
from kube_steps import bind_claim, free_port, wait_for  # noqa: E402
from kubernetes import client  # noqa: E402
from ray_steps import checkpoint_subdir, ray_job, reported  # noqa: E402
from rljob_nodeagent import AgentPool, claim_dir  # noqa: E402
from rljob_nodeagent.agent import DEFAULT_SHAPE  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_operator.api.timestamps import parse_iso  # noqa: E402
from rljob_testenv import binaries  # noqa: E402
from rljob_testenv.operator_process import OperatorProcess  # noqa: E402
from rljob_testenv.scenario import preemptor_pod  # noqa: E402

SAVE_EVERY, STEPS, GRACE, STEP_SECONDS = 10, 20, 12, 1.0
SAVE_PAUSES = (0, 4, 20)  # seconds added to each save made on notice
# name -> (the e2e job's framework, its extra overrides)
VARIANTS = {
    "verl": ("verl", ()),
    "verl-legacy": ("verl", ("trainer.use_v1=false",)),
    "rlinf": ("rlinf", ()),
}


def schedule(framework: str, pause: float) -> tuple[str, ...]:
    """Save every SAVE_EVERY steps, STEPS in all, each save on notice `pause` s slower (after
    the e2e job's own overrides)."""
    if framework == "verl":
        return (f"trainer.save_freq={SAVE_EVERY}", f"trainer.total_training_steps={STEPS}",
                f"trainer.seconds_per_deadline_save={pause}")  # fmt: skip
    return (f"runner.save_interval={SAVE_EVERY}", f"runner.max_steps={STEPS}",
            f"runner.seconds_per_deadline_save={pause}")  # fmt: skip


@dataclass(frozen=True)
class Result:
    variant: str
    save_on_notice: bool
    pause: float  # added to the save on notice
    at: int
    last_finished: int | None
    resumed_from: int | None
    lost: int | None
    recovery_seconds: float | None


def one_job(core, custom, api, namespace, volume, variant, save, pause, at, index) -> Result:
    framework, extra = VARIANTS[variant]
    short = {"verl": "v1", "verl-legacy": "vl", "rlinf": "rl"}[variant]
    name = f"{short}-{'on' if save else 'off'}-{pause:g}-{index}"
    job = ray_job(name, framework, namespace, free_port(), "low", grace=GRACE,
                  extra_args=(*extra, *schedule(framework, pause)))  # fmt: skip
    job["spec"]["saveOnNotice"] = save
    checkpoints = volume / name / checkpoint_subdir(framework)
    create_job(api, namespace, job)
    try:
        gang = running_gang(core, namespace, 0, 2, timeout=180)
        wait_for(lambda: reported(checkpoints) >= (0, at), 300, f"{name}'s step {at}")
        core.create_namespaced_pod(
            namespace, preemptor_pod("urgent", gang[1].spec.node_name, "high", 1)
        )
        done = wait_succeeded(api, namespace, name, timeout=600)
    finally:
        delete_pods(core, namespace, "app=preemptor")
    (recovery,) = done["status"]["recoveries"]
    took = None
    if recovery.get("firstRunningAt") and recovery.get("detectedAt"):
        took = parse_iso(recovery["firstRunningAt"]) - parse_iso(recovery["detectedAt"])
        took = took.total_seconds()
    custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    selector = f"{c.LABEL_JOB}={name}"
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items,
             120, f"{name}'s pods to go")  # fmt: skip
    return Result(variant, save, pause, at, recovery.get("lastFinishedStep"),
                  recovery.get("resumedFromStep"), recovery.get("lostSteps"), took)  # fmt: skip


def print_report(results: list[Result], rounds: int) -> None:
    print(f"\n{rounds} preemption(s) per row, of the worker pod, at a step between two saves "
          f"(save every {SAVE_EVERY} steps, steps of about {STEP_SECONDS:g} s, grace {GRACE} s); "
          "node agents, one run")  # fmt: skip
    print(f"{'framework':<12} {'save on notice':<15} {'(step+save)/grace':<18} "
          f"{'last finished':<14} {'resumed from':<13} {'lost steps (median, each)':<26} "
          f"{'recovery s (median)':<20}")  # fmt: skip
    for variant in VARIANTS:
        for save, pause in [(False, 0), *((True, pause) for pause in SAVE_PAUSES)]:
            key = (variant, save, pause)
            rows = [r for r in results if (r.variant, r.save_on_notice, r.pause) == key]
            lost = [r.lost for r in rows if r.lost is not None]
            took = [r.recovery_seconds for r in rows if r.recovery_seconds is not None]
            ratio = f"{(STEP_SECONDS + pause) / GRACE:.2f}" if save else "-"
            print(f"{variant:<12} {'on' if save else 'off':<15} {ratio:<18} "
                  f"{','.join(str(r.last_finished) for r in rows):<14} "
                  f"{','.join(str(r.resumed_from) for r in rows):<13} "
                  f"{(f'{statistics.median(lost):g} ({lost})' if lost else '-'):<26} "
                  f"{(f'{statistics.median(took):.1f}' if took else '-'):<20}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=1, help="preemptions per framework and setting"
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    binaries.install(say=say)
    started: list = []
    results: list[Result] = []
    with bench_cluster("lost") as bench:
        kubeconfig, namespace, work, api = bench.kubeconfig, bench.namespace, bench.work, bench.api
        try:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            scheduling = client.SchedulingV1Api(api)
            for klass, value in (("low", 100), ("high", 1000)):
                scheduling.create_priority_class(
                    client.V1PriorityClass(metadata=client.V1ObjectMeta(name=klass), value=value)
                )
            pv = bind_claim(core, namespace, CLAIM)
            root = work / "agents"
            volume = claim_dir(root, namespace, CLAIM)
            pool = AgentPool(kubeconfig, root, [f"{namespace}-{i}" for i in range(3)],
                             replace(DEFAULT_SHAPE, gpus=1), labels={POOL_LABEL: namespace},
                             heartbeat_seconds=5).start()  # fmt: skip
            started.append(pool)
            operator = OperatorProcess(kubeconfig, namespace, work / "operator.log",
                                       RLJOB_CHECKPOINT_VOLUMES=f"{CLAIM}={volume}")  # fmt: skip
            operator.start()
            started.append(operator)
            for index in range(args.rounds):
                at = rng.randint(SAVE_EVERY + 2, STEPS - 4)
                for variant in VARIANTS:
                    for save, pause in [(False, 0), *((True, p) for p in SAVE_PAUSES)]:
                        result = one_job(core, custom, api, namespace, volume, variant, save,
                                         pause, at, index)  # fmt: skip
                        results.append(result)
                        say(f"round {index + 1}: {result}")
            print_report(results, args.rounds)
            core.delete_persistent_volume(pv)
            for klass in ("low", "high"):
                scheduling.delete_priority_class(klass)
        finally:
            for thing in reversed(started):
                thing.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
