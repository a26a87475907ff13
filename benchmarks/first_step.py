"""Where a start from a checkpoint goes: the same command bare and under rljob, phase by phase.

A new gang after a preemption is a start from the newest checkpoint. This times it for
rljob's own trainer and for verl's real `main_ppo`, from a checkpoint a seed run saved:

- bare: outside Kubernetes, the same command and topology a user would run by hand: two
  torchrun processes of one rank each (`torchrun -m rljob_trainer ...`, torchrun's variables
  as rljob's launcher sets them), or a local 2-node Ray cluster (`ray start`, the head first)
  and `python -m verl.trainer.main_ppo` on it; both resume from the checkpoint on their own
  (the trainer's auto resume, verl's `resume_mode=auto`);
- under rljob: the demo's job (examples/grpo-demo.yaml, examples/verl-grpo-demo.yaml, as
  `make demo` and `make demo-verl` apply them) on a cluster of node agents (stand-in kubelets
  that run each pod's command as local processes, docs/nodeagent.md) with rljob's operator,
  the checkpoint on its claim: rljob finds it and passes the framework's resume switch.

Each start is timed from its launch (bare: the first process spawned; under rljob: the job's
`kubectl apply`) to the end of its first training step, and split at what each log shows:

- rljob's trainer logs its start ("startup: imports done", "process group up", "model and
  optimizer built", "resumed from ...": backends.run) with milliseconds; its first step is
  the first entry of its metrics.jsonl;
- verl's driver, its Ray cluster and rljob's node program are read as their lines come (every
  0.2 s, PYTHONUNBUFFERED set in both): Ray up and joined, the driver started, verl's workers
  built, the checkpoint loaded, the first step's metrics line;
- under rljob, a pod watch stamps the gang's creation and its pods running.

Node agents start a pod's processes at once: a real node adds the image and the container's
start to "pod start" (docs/kind.md has kind's). The machine is shared and noisy: rljob's
trainer is started `--repeats` times and the medians are quoted; verl, at about 100 s a start
on two cores, `--verl-repeats` times.

    .venv/bin/python benchmarks/first_step.py [--frameworks rljob verl] [--repeats 3]
        [--verl-repeats 1] [--out DIR]

The last line is JSON: {"rljob": {"bare_s", "under_rljob_s", "ratio", "phases": {"bare":
{...}, "under_rljob": {...}}}, "verl": {...}}, medians in seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))  # the demo's jobs: what `make demo` applies

import yaml  # noqa: E402
from demo_frameworks import RljobDemo, Setting, VerlDemo  # noqa: E402
from rljob_contract.steps import step_dir_name  # noqa: E402
from rljob_operator.api.spec import parse_spec  # noqa: E402
from rljob_operator.launcher import torchrun  # noqa: E402
from rljob_testenv import scenario  # noqa: E402
from rljob_testenv.localray import local_ray_cluster  # noqa: E402
from rljob_testenv.ports import free_port  # noqa: E402
from rljob_testenv.stacks import AgentStack  # noqa: E402
from rljob_trainer.metrics import read_metrics  # noqa: E402

NAMESPACE, CLAIM = "default", "rljob-checkpoints"
SEED_STEPS = {"rljob": 4, "verl": 2}  # the checkpoint each start resumes from
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}  # lines reach the log as they are printed
TIMEOUT = 900.0

# rljob's trainer: the phase that ends with each line of rank 0's log (backends.run).
TRAINER_MARKS = {
    "torchrun, interpreter, imports": re.compile(r"startup: imports done"),
    "process group": re.compile(r"startup: process group up"),
    "model and optimizer build": re.compile(r"startup: model and optimizer built"),
    "checkpoint load": re.compile(r"resumed from \S+ at step"),
}
ASCTIME = re.compile(r"\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
# verl on Ray: the phase that ends with the first line that matches, in the head's output.
VERL_MARKS = {
    "Ray start and join": re.compile(r"Ray nodes joined; starting the driver|RLJOB_BARE_RAY_UP"),
    "driver start (imports, Ray client, TaskRunner)": re.compile(r"\(TaskRunner\w* pid="),
    "workers, models and rollout built": re.compile(r"Resuming from "),
    "checkpoint load": re.compile(r"Loaded lr_scheduler from"),
}
COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours its actors' names
VERL_TIME = re.compile(r"INFO:(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}):")  # verl's logger
VERL_STEP = re.compile(r"(?:^|\) )step:(\d+) - ")  # as rljob_verl_cpu.results reads it


@dataclass
class Start:
    """One start's moments (Unix seconds), by name, in the order they came."""

    launched: float
    marks: dict[str, float] = field(default_factory=dict)
    first_step: float | None = None

    def phases(self) -> dict[str, float]:
        """Each phase's seconds: from the moment before it to its own."""
        moments = [("launch", self.launched), *self.marks.items()]
        moments.append(("first step", self.first_step or float("nan")))
        out: dict[str, float] = {}
        for (_, before), (name, at) in itertools.pairwise(moments):
            out[name] = round(at - before, 3)
        return out

    @property
    def total(self) -> float:
        return (self.first_step or float("nan")) - self.launched


class LineStamps:
    """When each line of a growing text first appeared (read every 0.2 s)."""

    def __init__(self, read: Callable[[], str]) -> None:
        self.read = read
        self.lines: list[tuple[float, str]] = []
        self._seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            time.sleep(0.2)

    def poll(self) -> None:
        try:
            text = self.read()
        except Exception:  # a log not there yet
            return
        lines = COLOUR.sub("", text).splitlines()
        now = time.time()
        complete = lines if text.endswith("\n") else lines[:-1]
        for line in complete[self._seen :]:
            self.lines.append((now, line))
        self._seen = max(self._seen, len(complete))

    @contextmanager
    def running(self) -> Iterator[LineStamps]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.poll()

    def first(self, pattern: re.Pattern[str], after: float = 0.0) -> float | None:
        """When the first line that matches (at or after `after`) was written: by the line's
        own milliseconds where it has them (verl's INFO lines), else when it was read."""
        for stamped, line in self.lines:
            if stamped >= after and pattern.search(line):
                own = VERL_TIME.search(line)
                if own is None:
                    return stamped
                written = datetime.strptime(own.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                return max(after, min(stamped, written))
        return None


class PodWatch:
    """When the gang's first pod was created and when all of its pods ran, as a watch saw it."""

    def __init__(self, kubeconfig: Path, job: str, nnodes: int) -> None:
        from kubernetes import client, config, watch

        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        self.core = client.CoreV1Api(client.ApiClient(configuration))
        self.watch = watch.Watch()
        self.job, self.nnodes = job, nnodes
        self.created: float | None = None
        self.running: float | None = None
        self._running: set[str] = set()
        self.stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from rljob_operator import constants as c

        selector = f"{c.LABEL_ROLE}={c.ROLE_TRAINER},{c.LABEL_JOB}={self.job}"
        pods = self.core.list_namespaced_pod
        events = self.watch.stream(pods, NAMESPACE, label_selector=selector,
                                   timeout_seconds=int(TIMEOUT))  # fmt: skip
        try:
            for event in events:
                self._seen(event)
        except Exception:  # the stream a stopped watch leaves open ends with the control plane
            if not self.stopped:
                raise

    def _seen(self, event: dict[str, Any]) -> None:
        now, pod = time.time(), event["object"]
        if self.created is None:
            self.created = now
        if pod.status and pod.status.phase == "Running":
            self._running.add(pod.metadata.name)
            if len(self._running) == self.nnodes and self.running is None:
                self.running = now

    def stop(self) -> None:
        self.stopped = True
        self.watch.stop()


def asctime(line: str) -> float | None:
    found = ASCTIME.search(line)
    if not found:
        return None
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def trainer_marks(log: str) -> dict[str, float]:
    """The phases' ends in rljob's trainer's rank 0 log, by the log's own milliseconds."""
    marks: dict[str, float] = {}
    for line in log.splitlines():
        for name, pattern in TRAINER_MARKS.items():
            if name not in marks and pattern.search(line) and (at := asctime(line)):
                marks[name] = at
    return marks


def wait_for(done: Callable[[], bool], what: str) -> None:
    """Every second: what is waited for is a job's end, which nothing here times."""
    deadline = time.monotonic() + TIMEOUT
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} in {TIMEOUT:.0f}s")
        time.sleep(1.0)


# ----------------------------------------------------------------- rljob's own trainer
def rljob_seed(out: Path) -> Path:
    """A checkpoint of SEED_STEPS steps of the demo's config, by 2 ranks under a local torchrun."""
    seed = out / "rljob-seed"
    if not (seed / "grpo_tiny" / "checkpoints" / step_dir_name(SEED_STEPS["rljob"])).is_dir():
        shutil.rmtree(seed, ignore_errors=True)
        args = [f"runner.output_dir={seed}", f"runner.max_steps={SEED_STEPS['rljob']}"]
        scenario.run_reference(args, {}, out / "rljob-seed.log", timeout=TIMEOUT)
    return seed / "grpo_tiny"


def named(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The documents with the job renamed: each start's pods (and their logs) are its own."""
    next(d for d in docs if d["kind"] == "RLTrainingJob")["metadata"]["name"] = name
    return docs


def rljob_job(claim: Path, start: int) -> list[dict[str, Any]]:
    """The demo's manifests, two steps past the seed, for the `start`th start."""
    steps = SEED_STEPS["rljob"] + 2
    demo = RljobDemo(Setting(steps, claim, claim, None, None, lambda _: ""))
    return named(demo.manifests(), f"grpo-demo-{start}")


def rljob_bare(out: Path, seed: Path, docs: list[dict[str, Any]]) -> Start:
    """Two torchrun processes, one rank each, as rljob's launcher starts them (its command
    and torchrun's variables), resuming from the seed on their own."""
    work = out / "rljob-bare"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(seed, work / "grpo_tiny")
    job = next(d for d in docs if d["kind"] == "RLTrainingJob")
    job["spec"]["rendezvousPort"] = free_port()
    spec = parse_spec(job["spec"])
    args = [a for a in spec.args if not a.startswith("runner.output_dir=")]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLJOB_", "PET_"))}
    launched = time.time()
    processes = []
    for rank in range(spec.nnodes):
        command = [*torchrun.command(spec, rank), *args, f"runner.output_dir={work}"]
        command[0] = str(scenario.TORCHRUN)
        env = {**clean, **torchrun.env(spec, "127.0.0.1", rank), **UNBUFFERED}
        with (work / f"rank-{rank}.log").open("wb") as log:
            processes.append(subprocess.Popen(command, env=env, stdout=log,
                                              stderr=subprocess.STDOUT))  # fmt: skip
    for process in processes:
        if process.wait(TIMEOUT) != 0:
            raise RuntimeError(f"bare torchrun failed: {(work / 'rank-0.log').read_text()[-2000:]}")
    start = Start(launched, trainer_marks((work / "rank-0.log").read_text()))
    start.first_step = first_step_after_seed(work / "grpo_tiny")
    return start


def first_step_after_seed(run_dir: Path) -> float:
    """When the first step after the seed's ended (metrics.jsonl holds the seed's steps too)."""
    logged = read_metrics(run_dir / "metrics.jsonl")
    return next(e["time"] for e in logged if e["step"] > SEED_STEPS["rljob"])


def rljob_under(stack: AgentStack, claim: Path, seed: Path, docs: list[dict[str, Any]]) -> Start:
    """The demo's job, applied with the seed on its claim."""
    run_dir = claim / "grpo-demo"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(seed, run_dir / "grpo_tiny")
    job = next(d for d in docs if d["kind"] == "RLTrainingJob")["metadata"]["name"]
    watch = PodWatch(stack.kubeconfig, job, 2)
    try:
        launched = time.time()
        stack.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump_all(docs))
        wait_for(lambda: finished(stack, job), f"end of job {job}")
    finally:
        watch.stop()
    log = stack.pod_log(NAMESPACE, f"{job}-a0-n0")
    start = Start(launched)
    start.marks = {"rljob: checkpoint look, gang created": watch.created or float("nan"),
                   "pod start": watch.running or float("nan"), **trainer_marks(log)}  # fmt: skip
    start.first_step = first_step_after_seed(run_dir / "grpo_tiny")
    stack.kubectl("delete", "-n", NAMESPACE, "rltrainingjob", job, "--wait=true")
    return start


def finished(stack: AgentStack, job: str) -> bool:
    phase = stack.kubectl("get", "-n", NAMESPACE, "rltrainingjob", job,
                          "-o", "jsonpath={.status.phase}", check=False)  # fmt: skip
    if phase == "Failed":
        raise RuntimeError(f"job {job} failed: {stack.operator_log(40)}")
    return phase == "Succeeded"


# ----------------------------------------------------------------- verl's main_ppo
def verl_demo(claim: Path, out: Path, steps: int) -> VerlDemo:
    return VerlDemo(Setting(steps, out, claim, None, None, lambda _: ""))


def verl_bare_run(demo: VerlDemo, work: Path, checkpoints: Path) -> Start:
    """A local 2-node Ray cluster, then verl's driver on it; verl's own auto resume."""
    from rljob_verl_cpu import recipe

    work.mkdir(parents=True, exist_ok=True)
    log = work / "driver.log"
    log.write_text("")
    stamps = LineStamps(log.read_text)
    node_args = (f"--num-cpus={recipe.NODE_CPUS}", f"--num-gpus={recipe.NODE_GPUS}")
    with stamps.running():
        launched = time.time()
        env_in = {**recipe.ENV, **UNBUFFERED}
        with local_ray_cluster(demo.nnodes, work / "ray", node_args, env_in) as (address, env):
            with log.open("a") as out:
                out.write("RLJOB_BARE_RAY_UP\n")
            argv = [sys.executable, "-m", "verl.trainer.main_ppo",
                    *demo.overrides(demo.inputs, checkpoints)]  # fmt: skip
            with log.open("ab") as out:
                driver_env = {**env, "RAY_ADDRESS": address}
                done = subprocess.run(argv, env=driver_env, cwd=work, stdout=out,
                                      stderr=subprocess.STDOUT, timeout=TIMEOUT)  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"verl failed: {log.read_text()[-3000:]}")
    return verl_start(launched, stamps)


def verl_start(launched: float, stamps: LineStamps, marks: dict[str, float] | None = None) -> Start:
    start = Start(launched, dict(marks or {}))
    after = max(start.marks.values(), default=launched)
    for name, pattern in VERL_MARKS.items():
        at = stamps.first(pattern, after)
        if at is not None:
            start.marks[name] = after = at
    start.first_step = next((t for t, line in stamps.lines if VERL_STEP.search(line)), None)
    return start


def verl_seed(demo: VerlDemo, out: Path) -> Path:
    """verl's own checkpoint of SEED_STEPS steps (saved at the last), from a bare run."""
    seed = out / "verl-seed" / "ckpt"
    if not (seed / step_dir_name(SEED_STEPS["verl"])).is_dir():
        shutil.rmtree(seed.parent, ignore_errors=True)
        seeding = verl_demo(demo.setting.claim, out, SEED_STEPS["verl"])
        seeding.inputs = demo.inputs
        verl_bare_run(seeding, seed.parent, seed)
    return seed


def verl_under(stack: AgentStack, demo: VerlDemo, seed: Path, start: int) -> Start:
    """The verl demo's job, applied with the seed's checkpoint on its claim."""
    checkpoints = demo.checkpoints
    shutil.rmtree(checkpoints, ignore_errors=True)
    shutil.copytree(seed, checkpoints)
    docs = named(demo.manifests(), f"{demo.job}-{start}")
    job_doc = next(d for d in docs if d["kind"] == "RLTrainingJob")
    unbuffered = [{"name": k, "value": v} for k, v in UNBUFFERED.items()]
    job_doc["spec"]["env"] = [*job_doc["spec"].get("env", []), *unbuffered]
    job = job_doc["metadata"]["name"]
    head = f"{job}-a0-n0"
    stamps = LineStamps(lambda: stack.pod_log(NAMESPACE, head))
    watch = PodWatch(stack.kubeconfig, job, demo.nnodes)
    try:
        with stamps.running():
            launched = time.time()
            stack.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump_all(docs))
            wait_for(lambda: finished(stack, job), f"end of job {job}")
    finally:
        watch.stop()
    pods = {"rljob: checkpoint look, gang created": watch.created or float("nan"),
            "pod start": watch.running or float("nan")}  # fmt: skip
    stack.kubectl("delete", "-n", NAMESPACE, "rltrainingjob", job, "--wait=true")
    return verl_start(launched, stamps, pods)


# ----------------------------------------------------------------- the report
def median_phases(starts: list[Start]) -> dict[str, float]:
    names = list(starts[0].phases())
    return {name: round(statistics.median(s.phases()[name] for s in starts), 2) for name in names}


def summarize(name: str, bare: list[Start], under: list[Start]) -> dict[str, Any]:
    bare_s = statistics.median(s.total for s in bare)
    under_s = statistics.median(s.total for s in under)
    result = {
        "bare_s": round(bare_s, 2), "under_rljob_s": round(under_s, 2),
        "ratio": round(under_s / bare_s, 3),
        "phases": {"bare": median_phases(bare), "under_rljob": median_phases(under)},
        "starts": {"bare": [round(s.total, 2) for s in bare],
                   "under_rljob": [round(s.total, 2) for s in under]},
    }  # fmt: skip
    print(f"\n{name}: launch to the end of the first step after resume, median of "
          f"{len(bare)} bare and {len(under)} under rljob")  # fmt: skip
    print(f"  bare {bare_s:.2f}s, under rljob {under_s:.2f}s: {under_s / bare_s:.2f}x")
    for where in ("bare", "under_rljob"):
        print(f"  {where}:")
        for phase, seconds in result["phases"][where].items():
            print(f"    {phase:<45} {seconds:7.2f}s")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", nargs="+", default=["rljob", "verl"],
                        choices=["rljob", "verl"])  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="starts of rljob's trainer")
    parser.add_argument("--verl-repeats", type=int, default=1, help="starts of verl")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "first-step")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    shutil.rmtree(out / "stack", ignore_errors=True)  # an earlier run's pods, logs and claim
    stack = AgentStack("first-step", out / "stack", CLAIM, 1)
    if stack.exists():
        stack.down(lambda _: None)
    stack.up(print)
    try:
        stack.start_operator(NAMESPACE, print)
        claim, volume = stack.claim_volume("first-step", NAMESPACE, CLAIM)
        stack.kubectl("apply", "-f", "-", input=yaml.safe_dump(volume))
        if "rljob" in args.frameworks:
            seed = rljob_seed(out)
            bare, under = [], []
            for i in range(args.repeats):  # alternated, so that a noisy minute hits both
                docs = rljob_job(claim, i)
                bare.append(rljob_bare(out, seed, docs))
                under.append(rljob_under(stack, claim, seed, docs))
                print(f"rljob start {i + 1}: bare {bare[-1].total:.2f}s, "
                      f"under rljob {under[-1].total:.2f}s")  # fmt: skip
            results["rljob"] = summarize("rljob's trainer", bare, under)
        if "verl" in args.frameworks:
            demo = verl_demo(claim, out, SEED_STEPS["verl"] + 1)
            demo.prepare(print)
            seed = verl_seed(demo, out)
            bare, under = [], []
            for i in range(args.verl_repeats):
                work = out / f"verl-bare-{i}"
                shutil.rmtree(work, ignore_errors=True)
                shutil.copytree(seed, work / "ckpt")
                bare.append(verl_bare_run(demo, work, work / "ckpt"))
                under.append(verl_under(stack, demo, seed, i))
                print(f"verl start {i + 1}: bare {bare[-1].total:.2f}s, "
                      f"under rljob {under[-1].total:.2f}s")  # fmt: skip
            results["verl"] = summarize("verl's main_ppo", bare, under)
    finally:
        stack.stop()
        stack.down(lambda _: None)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
