"""`make demo`: a GRPO job is preempted on a local cluster, resumes, and ends bit-exactly.

The job is rljob's own GRPO trainer by default, or with --framework verl (`make demo-verl`)
verl's own GRPO driver (`python -m verl.trainer.main_ppo`) on a gang of two Ray pods, on CPU;
what differs between the two (the manifest, where the steps and metrics are read, the
reference run, the comparison) is in hack/demo_frameworks.py, the rest is here.

1. starts the local cluster `demo` (kube-apiserver, etcd, scheduler, controller-manager;
   kwok runs no node here), installs the CRD, and starts two GPU nodes and the operator:
   - by default (`make demo`), two node agents (nodes whose pods run as local processes,
     devtools/rljob_nodeagent) and the operator as a local process, which reads the
     checkpoint claim's local directory in-process (RLJOB_CHECKPOINT_VOLUMES);
   - with --kind (`make demo-kind`), a kind cluster instead (a control plane and two workers
     on rootful podman, whose kubelets and containerds run the trainer image), and the
     operator installed by its Helm chart, which reads the claim through its inspector pod;
2. applies the framework's example (examples/grpo-demo.yaml, examples/verl-grpo-demo.yaml: a
   ReadWriteMany claim and a 2-node RLTrainingJob; the demo binds the claim to a local volume
   and sets the step count), and shows its progress live;
3. part-way, a pod of a higher PriorityClass needs the GPUs of one of the job's nodes: the
   scheduler preempts the job's pod there, and the demo shows the recovery as the operator
   reports it (detected, old gang gone, resume target, new gang running);
4. once the job has succeeded, runs the same config uninterrupted (after the job, so the
   two never share the CPU; reused from the cache when an earlier demo ran the same config
   with the same code) and checks that the final state is bitwise identical;
5. prints a report, writes a plot of reward and loss per step with the preemptions marked,
   and removes the cluster (unless --keep) and every process it started.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from demo_frameworks import FRAMEWORKS, DemoFramework, Logged, Reference, Setting, Verdict
from rljob_operator.api.timestamps import unix_seconds
from rljob_testenv import scenario
from rljob_testenv.stacks import AgentStack, KindStack, Stack

REPO = Path(__file__).resolve().parent.parent
NAME = "demo"
NAMESPACE = "default"
CLAIM = "rljob-checkpoints"
GPUS_PER_NODE = 2  # a preemptor that wants the whole node evicts the job's pod there
URGENT_CLASS = "rljob-demo-urgent"


def goodput_lines(figures: dict[str, Any], logged: list[Logged]) -> list[str]:
    """The job's status.goodput by cause, and the same ratio from the steps the trainer
    logged, as the report shows them."""
    if "ettr" not in figures:
        return ["goodput: not in the job's status"]
    wall = figures["wallSeconds"]

    def share(key: str) -> str:
        return f"{figures.get(key, 0.0):.1f}s ({figures.get(key, 0.0) / wall:.0%})"

    in_steps = seconds_in_steps(logged)
    bound = " (an upper bound: rljob cannot see this framework's steps)"
    return [
        f"goodput (status.goodput): ETTR {figures['ettr']:.1%} over {wall:.1f}s of wall time"
        + (bound if figures.get("ettrIsUpperBound") else ""),
        f"  waiting {share('waitingSeconds')}, pod start {share('podStartSeconds')}, "
        f"framework start {share('frameworkStartSeconds')}, training "
        f"{share('trainingSeconds')}, stopping {share('stoppingSeconds')}",
        f"  {figures['lostSteps']} steps lost to disruptions, {figures['lostSeconds']:.1f}s of "
        f"training done again; productive {share('productiveSeconds')}",
        f"  the trainer's own log: {in_steps:.1f}s in training steps ({in_steps / wall:.1%} of "
        f"the wall), each attempt's first step counted as its start; the status says "
        f"{figures['ettr']:.1%}, {abs(figures['ettr'] * wall - in_steps) / wall:.1%} of the wall "
        "apart",
    ]


def seconds_in_steps(logged: list[Logged]) -> float:
    """Time in training steps as the trainer logged them: each step's time after the one
    before it in its attempt (an attempt's first step ends its start, and is not counted),
    less the steps that a later attempt trained again."""
    by_attempt: dict[int, list[Logged]] = {}
    for entry in sorted(logged, key=lambda e: (e.attempt, e.step)):
        by_attempt.setdefault(entry.attempt, []).append(entry)
    attempts = sorted(by_attempt)
    seconds = 0.0
    for index, attempt in enumerate(attempts):
        steps = by_attempt[attempt]
        later = [by_attempt[a][0].step for a in attempts[index + 1 :]]
        kept_until = min(later, default=steps[-1].step + 1) - 1  # resumed after that step
        for before, entry in itertools.pairwise(steps):
            if entry.step <= kept_until:
                seconds += entry.time - before.time
    return seconds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--framework", choices=sorted(FRAMEWORKS), default="rljob",
        help="whose trainer the job runs: rljob's own (default) or verl's main_ppo",
    )  # fmt: skip
    parser.add_argument(
        "--steps", type=int,
        help="training steps (default: " + ", ".join(
            f"{name} {kind.default_steps}" for name, kind in FRAMEWORKS.items()) + ")",
    )  # fmt: skip
    parser.add_argument(
        "--preemptions", type=int, default=1, help="how often to preempt the job (default 1)"
    )
    sizes = sorted({size for kind in FRAMEWORKS.values() for size in kind.model_sizes})
    parser.add_argument("--model-size", choices=sizes, help="rljob's trainer: default tiny")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    parser.add_argument("--out", type=Path, help="output folder (default out/demo-<time>)")
    parser.add_argument("--cluster", default=NAME, help=f"local cluster name (default {NAME})")
    parser.add_argument(
        "--kind",
        action="store_true",
        help="run on a kind cluster (the trainer image in containers on kind's nodes) under "
        "the chart-installed operator, instead of node agents; needs root, podman and ~20 GB "
        "of disk",
    )
    args = parser.parse_args()
    kind = FRAMEWORKS[args.framework]
    if args.kind and not kind.on_kind:
        parser.error(f"--framework {args.framework} runs on node agents only")
    if args.model_size and args.model_size not in kind.model_sizes:
        parser.error(f"--framework {args.framework} has no --model-size {args.model_size}")
    args.steps = args.steps or kind.default_steps
    if args.steps < 4 * (args.preemptions + 1):
        parser.error(f"--steps {args.steps} is too short for {args.preemptions} preemptions")
    return args


@dataclass
class Recovery:
    """What the demo saw of one recovery, beside what the operator recorded."""

    index: int  # the new attempt is index + 1
    preempted_at_step: int
    node: str
    sent: float
    shown: set[str] = field(default_factory=set)
    gone: float | None = None
    first_step: float | None = None
    record: dict[str, Any] = field(default_factory=dict)


class Screen:
    """Lines with the time since submission, and one progress line kept at the bottom."""

    def __init__(self) -> None:
        self.start = time.time()
        self.tty = sys.stdout.isatty()
        self.bar_shown = False
        self.last_plain = -10
        self.timeline: list[tuple[float, str]] = []

    def say(self, message: str, at: float | None = None, timeline: bool = True) -> None:
        moment = at if at is not None else time.time()
        if timeline:
            self.timeline.append((moment, message))
        self.clear()
        print(f"[{moment - self.start:6.1f}s] {message}", flush=True)

    def clear(self) -> None:
        if self.tty and self.bar_shown:
            print("\r\033[K", end="")
            self.bar_shown = False

    def bar(self, step: int, total: int, text: str) -> None:
        width = 30
        done = int(width * step / total) if total else 0
        line = f"  [{'#' * done}{'.' * (width - done)}] step {step:>4}/{total}  {text}"
        if self.tty:
            print("\r\033[K" + line, end="", flush=True)
            self.bar_shown = True
        elif step >= self.last_plain + 10 or (step == total and self.last_plain != total):
            self.last_plain = step
            print(line, flush=True)


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        from kubernetes import client, config

        self.args = args
        self.name = args.cluster
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self.out = (args.out or REPO / "out" / f"demo-{stamp}").resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.screen = Screen()
        self.stack: Stack = (
            KindStack(self.name, REPO, workers=2, gpus_per_node=GPUS_PER_NODE, out=self.out)
            if args.kind
            else AgentStack(self.name, self.out, CLAIM, GPUS_PER_NODE)
        )
        self.client, self.config = client, config
        self.seen: dict[tuple[int, int], Logged] = {}  # (attempt, step) -> what it logged
        self.recoveries: list[Recovery] = []
        self.events_seen: set[str] = set()

    # ------------------------------------------------------------------ set-up
    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.stack.kubectl(*args, input=input)

    def start(self) -> None:
        def say(message: str) -> None:
            self.screen.say(message, timeline=False)

        say(f"output folder: {self.out}")
        if self.stack.exists():
            say(f"cluster {self.name!r} is left from an earlier run: removing it")
            self.stack.down(say=lambda m: None)
        self.kubeconfig = self.stack.up(say)
        configuration = self.client.Configuration()
        self.config.load_kube_config(str(self.kubeconfig), client_configuration=configuration)
        api = self.client.ApiClient(configuration)
        self.core = self.client.CoreV1Api(api)
        self.custom = self.client.CustomObjectsApi(api)
        self.stack.start_operator(NAMESPACE, say)
        claim_dir, volume = self.stack.claim_volume("demo-checkpoints", NAMESPACE, CLAIM)
        urgent = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": URGENT_CLASS},
            "value": 1000,
            "description": "rljob demo: an urgent job that may preempt training",
        }
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([volume, urgent]))
        setting = Setting(
            steps=self.args.steps, out=self.out, claim=claim_dir, image=self.stack.trainer_image,
            model_size=self.args.model_size,
            pod_log=lambda pod: self.stack.pod_log(NAMESPACE, pod),
        )  # fmt: skip
        self.framework: DemoFramework = FRAMEWORKS[self.args.framework](setting)
        self.framework.prepare(say)

    # ------------------------------------------------------------------ watching
    def job(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(
            "rljob.io", "v1alpha1", NAMESPACE, "rltrainingjobs", self.framework.job
        )

    def pods(self, attempt: int | None = None) -> list[Any]:
        return scenario.trainer_pods(self.core, NAMESPACE, attempt)

    def show_events(self) -> None:
        events = self.core.list_namespaced_event(
            NAMESPACE,
            field_selector=f"involvedObject.kind=RLTrainingJob,involvedObject.name={self.framework.job}",
        ).items
        for event in sorted(events, key=lambda e: e.metadata.creation_timestamp):
            if event.metadata.name in self.events_seen:
                continue
            self.events_seen.add(event.metadata.name)
            self.screen.say(f"event {event.reason}: {event.message}", timeline=False)

    def run_job(self) -> dict[str, Any]:
        say, steps, framework = self.screen.say, self.args.steps, self.framework
        targets = [
            steps * (i + 1) // (self.args.preemptions + 1) for i in range(self.args.preemptions)
        ]
        manifests = yaml.safe_dump_all(framework.manifests())
        (self.out / "applied.yaml").write_text(manifests)
        self.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=manifests)
        self.submitted = time.time()
        self.screen.start = self.submitted
        say(
            f"submitted {framework.example.relative_to(REPO)} (as applied: applied.yaml): "
            f"{framework.job}, {framework.shape}, {steps} steps; preempting after steps "
            f"{', '.join(map(str, targets))}"
        )
        shown: set[str] = set()
        deadline = time.monotonic() + 60 * 30
        while time.monotonic() < deadline:
            self.polled = time.time()
            pods = self.pods()  # before the job: a pod missing now was gone before this status
            job = self.job()
            status = job.get("status") or {}
            attempt = status.get("attempt", 0)
            progress = framework.progress()
            for entry in framework.logged(attempt):
                self.seen[(entry.attempt, entry.step)] = entry
            self.show_events()
            if "running" not in shown and attempt == 0 and status.get("phase") == "Running":
                shown.add("running")
                nodes = sorted({p.spec.node_name for p in pods if p.spec.node_name})
                say(f"gang of attempt 0 running on {', '.join(nodes)} ({framework.starting})")
            first = [e for (a, _), e in self.seen.items() if a == 0]
            if "first" not in shown and first:
                shown.add("first")
                entry = min(first, key=lambda e: e.step)
                say("attempt 0 finished its first training step", at=entry.time)
            self.follow_recoveries(status, progress, pods)
            if status.get("phase") in ("Succeeded", "Failed"):
                self.screen.clear()
                say(f"job {status['phase']}: {status['conditions'][-1]['message']}")
                return job
            pending = len(self.recoveries)
            if (
                pending < len(targets)
                and attempt == pending
                and progress.get("attempt") == attempt
                and progress.get("step", 0) >= targets[pending]
            ):
                self.preempt(pending, progress["step"])
            latest = max(self.seen.items(), default=None, key=lambda kv: (kv[0][1], kv[0][0]))
            if latest:
                entry = latest[1]
                self.screen.bar(
                    entry.step,
                    steps,
                    f"reward {entry.reward:.3f}  loss "
                    f"{entry.loss:+.4f}  attempt {attempt}  {status.get('phase', '')}",
                )
            time.sleep(0.5)
        raise RuntimeError("the job did not finish in 30 minutes")

    def preempt(self, index: int, step: int) -> None:
        pods = self.pods(index)
        rank0 = next((p for p in pods if p.metadata.labels.get("rljob.io/node-rank") == "0"), None)
        if rank0 is None or not rank0.spec.node_name:
            return
        node = rank0.spec.node_name
        name = f"urgent-{index + 1}"
        labels = {"app": "rljob-demo-urgent"}
        image = self.stack.urgent_image
        urgent = scenario.preemptor_pod(name, node, URGENT_CLASS, GPUS_PER_NODE, image, labels)
        self.core.create_namespaced_pod(NAMESPACE, urgent)
        self.recoveries.append(Recovery(index, step, node, time.time()))
        self.screen.say(
            f"preemption {index + 1}: pod {name} (priority {URGENT_CLASS}=1000) needs "
            f"all {GPUS_PER_NODE} GPUs of {node}, where {rank0.metadata.name} runs "
            f"(after step {step})"
        )

    def follow_recoveries(
        self, status: dict[str, Any], progress: dict[str, Any], pods: list[Any]
    ) -> None:
        def of(attempt: int) -> list[Any]:
            return [p for p in pods if p.metadata.labels.get("rljob.io/attempt") == str(attempt)]

        say = self.screen.say
        records = status.get("recoveries") or []
        for seen in self.recoveries:
            if seen.index >= len(records):
                continue
            record = seen.record = records[seen.index]
            old, new = seen.index, seen.index + 1
            if "detected" not in seen.shown:
                seen.shown.add("detected")
                say(
                    f"  detected: {record['kind']} {record['reason']} of {record['pod']} on "
                    f"{record['node']}",
                    at=unix_seconds(record["detectedAt"]),
                )
            if "gone" not in seen.shown and not of(old):
                seen.shown.add("gone")
                # The operator creates the new gang only once the old one is gone.
                created = unix_seconds(record.get("gangCreatedAt"))
                seen.gone = min(self.polled, created) if created else self.polled
                say(
                    f"  old gang gone: every pod of attempt {old} stopped and deleted", at=seen.gone
                )
            if "target" not in seen.shown and record.get("gangCreatedAt"):
                seen.shown.add("target")
                created = unix_seconds(record["gangCreatedAt"]) or time.time()
                timeline = self.screen.timeline
                for i, (moment, text) in enumerate(timeline):  # gone before it was created
                    if text.startswith("  old gang gone") and f"attempt {old} " in text:
                        timeline[i] = (min(moment, created - 0.001), text)
                where = (status.get("resumeFrom") or {}).get("path", "?")
                say(
                    f"  resume target: {where} (step {record.get('resumedFromStep')}; last "
                    f"finished step {record.get('lastFinishedStep')}, {record.get('lostSteps')} "
                    f"steps lost)",
                    at=unix_seconds(record["gangCreatedAt"]),
                )
            if "running" not in seen.shown and record.get("firstRunningAt"):
                seen.shown.add("running")
                nodes = sorted({p.spec.node_name for p in of(new) if p.spec.node_name})
                say(
                    f"  new gang (attempt {new}) running on {', '.join(nodes)}",
                    at=unix_seconds(record["firstRunningAt"]),
                )
                self.core.delete_namespaced_pod(
                    f"urgent-{seen.index + 1}", NAMESPACE, grace_period_seconds=0
                )
                say(f"  the urgent pod on {seen.node} is done: its node is free again")
            if "trained" not in seen.shown and progress.get("attempt") == new:
                seen.shown.add("trained")
                times = [e.time for (a, _), e in self.seen.items() if a == new]
                seen.first_step = min(times) if times else time.time()
                since = seen.first_step - (unix_seconds(record["detectedAt"]) or seen.first_step)
                say(f"  training again: step {progress['step']}, {since:.1f}s after detection")

    # ------------------------------------------------------------------ the verdict
    def reference(self) -> Reference:
        """The framework's uninterrupted run, its progress on the bar."""
        reference = self.framework.reference(
            lambda message: self.screen.say(message, timeline=False),
            lambda step, text: self.screen.bar(step, self.args.steps, text),
        )
        self.screen.clear()
        return reference

    def report(self, job: dict[str, Any], reference: Reference, verdict: Verdict) -> str:
        status = job["status"]
        start = self.submitted
        done = unix_seconds(status.get("completionTime")) or time.time()
        lines = [
            "",
            "=" * 78,
            "rljob demo report",
            "=" * 78,
            f"job {self.framework.job}: {self.framework.shape}, {self.args.steps} steps; "
            f"{status['phase']} in {done - start:.1f}s after {status['attempt'] + 1} attempts "
            f"({status['preemptions']} preemption(s), {status['failures']} failure(s))",
            "",
            "timeline (seconds since the job was submitted):",
        ]
        lines += [
            f"  {at - start:7.1f}  {text.strip()}" for at, text in sorted(self.screen.timeline)
        ]
        lines += ["", "recoveries:"]
        for seen in self.recoveries:
            r = seen.record
            detected = unix_seconds(r.get("detectedAt"))
            running = unix_seconds(r.get("firstRunningAt"))
            created = unix_seconds(r.get("gangCreatedAt"))
            lines.append(
                f"  {seen.index + 1}. {r.get('reason')} of {r.get('pod')} on {r.get('node')}: last "
                f"finished step {r.get('lastFinishedStep')}, resumed from step "
                f"{r.get('resumedFromStep')}, {r.get('lostSteps')} steps lost"
            )
            if detected and created and running and seen.first_step:
                lines.append(
                    f"     recovery time: {running - detected:.1f}s from detection to the new gang "
                    f"running (old gang stopped and new gang created {created - detected:.1f}s "
                    f"after detection), {seen.first_step - detected:.1f}s to its first step"
                )
            stepped = unix_seconds(r.get("firstStepAt"))
            if detected and running and stepped:
                lines.append(
                    f"     status: first step after resume {stepped - detected:.1f}s after "
                    f"detection (pod start {running - detected:.1f}s, framework start "
                    f"{stepped - running:.1f}s)"
                )
        logged = list(self.seen.values())
        lines += ["", *goodput_lines(status.get("goodput") or {}, logged)]
        lines += [
            "",
            f"reference (uninterrupted): {reference.note}",
            *verdict.lines,
            f"plot: {self.out / 'demo.png'}",
            f"logs: {self.stack.logs()}",
        ]
        return "\n".join(lines)

    def plot(self, reference: Reference, verdict: Verdict) -> Path:
        """Reward and loss per step: the job's attempts over the reference (a wide grey band
        under them), lost steps as crosses, the preemptions as red lines; below, the job's
        value minus the reference's at every step."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        final: dict[int, Logged] = {}  # a step the job did again after a resume: the later
        for (_, step), entry in sorted(self.seen.items()):
            final[step] = entry
        ref = reference.curve
        fig, axes = plt.subplots(
            3, 1, figsize=(10, 8.5), sharex=True, gridspec_kw={"height_ratios": [3, 3, 1.4]}
        )
        colors = plt.get_cmap("tab10")
        panels = (
            (axes[0], "reward", self.framework.reward_label),
            (axes[1], "loss", self.framework.loss_label),
        )
        for ax, key, label in panels:
            steps = sorted(ref)
            ax.plot(
                steps,
                [getattr(ref[s], key) for s in steps],
                color="0.6",
                lw=7,
                alpha=0.45,
                solid_capstyle="round",
                label="uninterrupted reference (under the job)",
            )
            for attempt in sorted({a for a, _ in self.seen}):
                mine = sorted(s for a, s in self.seen if a == attempt)
                kept = [s for s in mine if final[s].attempt == attempt]
                lost = [s for s in mine if s not in kept]
                ax.plot(
                    kept,
                    [getattr(self.seen[(attempt, s)], key) for s in kept],
                    color=colors(attempt),
                    lw=1.6,
                    marker=".",
                    label=f"job, attempt {attempt}",
                )
                if lost:
                    ax.plot(
                        lost,
                        [getattr(self.seen[(attempt, s)], key) for s in lost],
                        color="black",
                        marker="x",
                        ls="none",
                        label=f"attempt {attempt}: steps lost",
                    )
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        for key, style in (("reward", "-"), ("loss", "--")):
            steps = sorted(s for s in final if s in ref)
            axes[2].plot(
                steps,
                [getattr(final[s], key) - getattr(ref[s], key) for s in steps],
                ls=style,
                marker=".",
                label=f"{key}: job - reference",
            )
        axes[2].set_ylabel("difference")
        axes[2].grid(alpha=0.3)
        axes[2].legend(loc="lower left", fontsize=8)
        for ax in axes:
            for seen in self.recoveries:
                step = seen.record.get("lastFinishedStep", seen.preempted_at_step) + 0.5
                ax.axvline(step, color="red", ls=":", lw=1.5)
        for seen in self.recoveries:
            step = seen.record.get("lastFinishedStep", seen.preempted_at_step) + 0.5
            axes[2].annotate(
                f" preempted ({seen.record.get('reason', '?')}):\n resumed from step "
                f"{seen.record.get('resumedFromStep')}, {seen.record.get('lostSteps', '?')} lost",
                (step, 0.95),
                xycoords=("data", "axes fraction"),
                va="top",
                ha="left",
                fontsize=8,
                color="red",
                bbox={"fc": "white", "ec": "none", "alpha": 0.8},
            )
        axes[0].legend(loc="lower right", fontsize=8)
        axes[2].set_xlabel("training step")
        fig.suptitle(
            f"rljob demo: {self.framework.shape}\n{self.args.steps} steps, preempted "
            f"{len(self.recoveries)}x; {verdict.headline}",
            fontsize=10.5,
        )
        fig.tight_layout()
        path = self.out / "demo.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    # ------------------------------------------------------------------ clean-up
    def stop(self) -> None:
        self.screen.clear()
        stopped = self.stack.stop()
        name = self.name
        if self.args.keep:
            down = "testenv kind down" if self.args.kind else "testenv down"
            print(
                f"cluster {name!r} kept: export KUBECONFIG={self.stack.kubeconfig}; "
                f"kubectl get rltj,pods,events; remove it with `.venv/bin/rljob {down} "
                f"--name {name}`"
            )
        elif self.stack.exists():
            self.stack.down(say=lambda m: None)
        print(
            f"cleaned up: {stopped}" + ("" if self.args.keep else f", cluster {name!r} removed"),
            flush=True,
        )


def main() -> int:
    args = parse_args()
    demo = Demo(args)
    try:
        demo.start()
        job = demo.run_job()
        if job["status"]["phase"] != "Succeeded":
            print(json.dumps(job["status"], indent=1))
            return 1
        print(demo.kubectl("get", "rltj", "-n", NAMESPACE))
        reference = demo.reference()
        verdict = demo.framework.compare(reference, job["status"])
        demo.plot(reference, verdict)
        report = demo.report(job, reference, verdict)
        print(report)
        (demo.out / "report.txt").write_text(report + "\n")
        return 0 if verdict.same else 1
    except KeyboardInterrupt:
        print("\ninterrupted", flush=True)
        return 130
    finally:
        demo.stop()


if __name__ == "__main__":
    sys.exit(main())
