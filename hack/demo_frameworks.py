"""What the demo does differently for each framework it runs: the job it applies, where it
reads the job's steps and metrics, the uninterrupted reference run and what it compares with
it. hack/demo.py does the rest (the cluster, the preemption, the recovery, the report and the
plot) the same way for all; FRAMEWORKS is what `--framework` chooses from.

- `rljob` (`make demo`): rljob's own GRPO trainer under torchrun, examples/grpo-demo.yaml;
- `verl` (`make demo-verl`): verl's own GRPO driver (`python -m verl.trainer.main_ppo`, its
  V1 trainer) on a gang of two Ray pods, examples/verl-grpo-demo.yaml, on CPU through the
  test support in devtools/rljob_verl_cpu (which the e2e test of the same driver uses).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol

import yaml
from rljob_contract import progress
from rljob_contract.steps import step_dir_name
from rljob_operator.launcher.identity import pod_name
from rljob_testenv import cached, scenario
from rljob_testenv.ports import free_port
from rljob_trainer.metrics import read_metrics

REPO = Path(__file__).resolve().parent.parent
Say = Callable[[str], None]
Bar = Callable[[int, str], None]  # the progress line: step, text


@dataclass(frozen=True)
class Setting:
    """What a framework's part of the demo is given once the cluster is up."""

    steps: int
    out: Path  # the demo's output folder
    claim: Path  # the host folder behind the checkpoint claim
    image: str | None  # the trainer image the nodes run; None: the manifest's (node agents)
    model_size: str | None  # --model-size, for the frameworks that have sizes
    pod_log: Callable[[str], str]  # a pod's log so far, by name: verl logs its metrics there


@dataclass(frozen=True)
class Logged:
    """A step as the job logged it: what the progress line and the plot show."""

    attempt: int
    step: int
    reward: float
    loss: float
    time: float  # when it was logged (when the demo first saw it, where the log has no time)


class Point(NamedTuple):
    """A step of the uninterrupted reference, on the plot."""

    reward: float
    loss: float


@dataclass(frozen=True)
class Reference:
    """The uninterrupted run of the same config: its folder (what `compare` reads), each
    step's reward and loss, and how it came to be (run now, or reused from the cache)."""

    folder: Path
    curve: dict[int, Point]
    note: str


@dataclass(frozen=True)
class Verdict:
    """The comparison with the reference: the report's lines, a headline for the plot, and
    whether every check held (the demo's exit status)."""

    lines: list[str]
    headline: str
    same: bool


class DemoFramework(Protocol):
    """One framework's part of the demo; the class attributes are read before the cluster
    starts (to check the options), the rest once it is up."""

    example: ClassVar[Path]  # the manifest the demo applies
    default_steps: ClassVar[int]
    on_kind: ClassVar[bool]  # whether --kind can run it (the trainer image has it)
    model_sizes: ClassVar[dict[str, list[str]]]  # --model-size: the overrides of each size
    starting: ClassVar[str]  # what a new gang does before its first step
    reward_label: ClassVar[str]
    loss_label: ClassVar[str]
    job: str
    shape: str  # what runs, for the report and the plot: the program, the gang, the model

    def __init__(self, setting: Setting) -> None: ...

    def manifests(self) -> list[dict[str, Any]]:
        """The example's documents, as the demo applies them."""
        ...

    def prepare(self, say: Say) -> None:
        """Put what the job reads on the claim, before the job is created."""
        ...

    def progress(self) -> dict[str, Any]:
        """The job's progress record (last finished step, attempt), {} while there is none."""
        ...

    def logged(self, attempt: int) -> list[Logged]:
        """Every step the job logged so far, in attempts 0 to `attempt` (the current one)."""
        ...

    def reference(self, say: Say, bar: Bar) -> Reference:
        """The uninterrupted run, from the cache where an earlier demo ran the same config."""
        ...

    def compare(self, reference: Reference, status: dict[str, Any]) -> Verdict:
        """The job's final state and metrics against the reference's, once it succeeded."""
        ...


def example_documents(example: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The example's documents, and its RLTrainingJob among them (to edit in place)."""
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    return docs, next(d for d in docs if d["kind"] == "RLTrainingJob")


def yes(value: bool) -> str:
    return "YES" if value else "NO"


def headline(what: str, same: bool) -> str:
    """The plot's verdict on `what` (the state compared)."""
    return f"{what} {'bitwise identical to' if same else 'DIFFER from'} the uninterrupted run"


class RljobDemo:
    """`make demo`: rljob's own GRPO trainer (FSDP2) as 2 torchrun pods; the reference is the
    same config under a local torchrun; it compares the final weights and every step's
    metrics.jsonl entry."""

    example = REPO / "examples" / "grpo-demo.yaml"
    default_steps = 60
    on_kind = True
    model_sizes: ClassVar[dict[str, list[str]]] = {  # d_model x layers (docs/trainer.md)
        "tiny": [],  # the packaged config: d_model 64, 2 layers
        "small": ["model.d_model=128", "model.n_layers=2", "model.d_ff=512"],
        "medium": ["model.d_model=256", "model.n_layers=4", "model.d_ff=1024"],
        "large": ["model.d_model=384", "model.n_layers=8", "model.d_ff=1536"],
    }
    starting = "torchrun starting"
    reward_label = "mean reward"
    loss_label = "GRPO loss"
    sources = REPO / "trainer_image" / "rljob_trainer"  # the reference's cache key

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        size = setting.model_size or "tiny"
        self.overrides = [f"runner.max_steps={setting.steps}", *self.model_sizes[size]]
        _, job = example_documents(self.example)
        self.job = job["metadata"]["name"]
        self.shape = f"rljob's GRPO trainer, 2 nodes x 1 process, model {size}"
        self.checkpoints = setting.claim / job["spec"]["checkpoint"]["directory"]
        self.run_dir = self.checkpoints.parent  # metrics.jsonl, beside the checkpoints

    def manifests(self) -> list[dict[str, Any]]:
        """The example with the step count and model size set (and the image on kind)."""
        docs, job = example_documents(self.example)
        spec = job["spec"]
        args = [a for a in spec["args"] if not a.startswith("runner.max_steps=")]
        spec["args"] = [*args, *self.overrides]
        if self.setting.image:
            spec["image"] = self.setting.image
        return docs

    def prepare(self, say: Say) -> None:
        """Nothing: the trainer makes its prompts from its config."""

    def progress(self) -> dict[str, Any]:
        return scenario.read_progress(self.checkpoints) or {}

    def logged(self, attempt: int) -> list[Logged]:
        """From the trainer's metrics.jsonl, which holds every attempt's steps with their time."""
        return [
            Logged(e.get("attempt", 0), e["step"], e["reward"], e["loss"], e["time"])
            for e in read_metrics(self.run_dir / "metrics.jsonl")
        ]

    def reference(self, say: Say, bar: Bar) -> Reference:
        """The final model and metrics of the same config under a local torchrun, cached by
        the config, the trainer's source and the torch version (rljob_testenv.cached)."""
        spec = next(d for d in self.manifests() if d["kind"] == "RLTrainingJob")["spec"]
        args = [a for a in spec["args"] if not a.startswith("runner.output_dir=")]
        env = {
            "RLJOB_SAVE_INTERVAL": str(spec["checkpoint"]["saveInterval"]),
            "RLJOB_MAX_TO_KEEP": str(spec["checkpoint"]["maxToKeep"]),
        }
        steps = self.setting.steps
        started = time.time()

        def run(folder: Path) -> None:
            work = self.setting.out / "reference"
            shutil.rmtree(work, ignore_errors=True)
            say(
                "reference: the same config, uninterrupted, 2 ranks under a local torchrun "
                "(run now, after the job, so that the two never share the CPU)"
            )
            metrics = work / "grpo_tiny" / "metrics.jsonl"

            def show() -> None:
                if done := read_metrics(metrics):
                    bar(done[-1]["step"], f"reward {done[-1]['reward']:.3f}  (reference)")

            log = self.setting.out / "reference.log"
            scenario.run_reference([*args, f"runner.output_dir={work}"], env, log,
                                   while_running=show)  # fmt: skip
            model = scenario.final_model(folder, steps)
            model.parent.mkdir(parents=True)
            shutil.copy(scenario.final_model(work / "grpo_tiny" / "checkpoints", steps), model)
            shutil.copy(metrics, folder / "metrics.jsonl")

        key = cached.inputs_key([args, env], [self.sources], ["torch"])
        cache, ran_now = cached.run_once("rljob-demo", key, run)
        note = (
            f"run after the job in {time.time() - started:.0f}s (cached in {cache})"
            if ran_now
            else f"reused from {cache} (an earlier demo ran this config and trainer code)"
        )
        curve = {
            e["step"]: Point(e["reward"], e["loss"]) for e in read_metrics(cache / "metrics.jsonl")
        }
        return Reference(cache, curve, note)

    def compare(self, reference: Reference, status: dict[str, Any]) -> Verdict:
        """The final model tensor by tensor, and the exact metrics of every step."""
        from safetensors import safe_open

        steps = self.setting.steps
        model = scenario.final_model(self.checkpoints, steps)
        same_weights = not scenario.differing_tensors(
            model, scenario.final_model(reference.folder, steps)
        )
        metrics = read_metrics(self.run_dir / "metrics.jsonl")
        same_metrics = len(metrics) == steps and not scenario.differing_steps(
            metrics, read_metrics(reference.folder / "metrics.jsonl")
        )
        with safe_open(str(model), "pt") as tensors:
            count = len(list(tensors.keys()))
        same = same_weights and same_metrics
        return Verdict(
            [
                f"final weights ({count} tensors) bitwise identical to the uninterrupted run: "
                f"{yes(same_weights)}",
                f"loss, reward, KL, grad norm ... of all {steps} steps identical: "
                f"{yes(same_metrics)}",
            ],
            headline("final weights", same),
            same,
        )


class VerlDemo:
    """`make demo-verl`: verl's own GRPO driver as a gang of 2 Ray pods on CPU (verl's world of
    2 FSDP2 ranks, a tiny random Qwen2), saved on notice through verl's checkpoint manager and
    resumed through verl's resume switch; the reference is the same driver and overrides on a
    local 2-node Ray cluster outside Kubernetes. verl logs each step's metrics on the head's
    output only, so the demo reads them there. Node agents only: kind runs the trainer
    image, which holds no verl."""

    example = REPO / "examples" / "verl-grpo-demo.yaml"
    default_steps = 30
    on_kind = False
    model_sizes: ClassVar[dict[str, list[str]]] = {}  # the recipe's model: 1 layer, hidden 16
    starting = "Ray starting on both pods, then verl's driver on the head"
    reward_label = "reward (critic/score/mean)"
    loss_label = "loss (actor/pg_loss)"
    save_freq = 10  # verl's periodic saves; a preemption's save is the one on notice

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        _, job = example_documents(self.example)
        self.job = job["metadata"]["name"]
        spec = job["spec"]
        self.nnodes = spec["nnodes"]
        self.mount = spec["checkpoint"]["mountPath"]
        self.directory = spec["checkpoint"]["directory"]
        self.checkpoints = setting.claim / self.directory
        self.inputs = setting.out / "verl-inputs"  # made here, copied onto the claim
        self.shape = (
            f"verl's main_ppo (GRPO, V1 trainer), {self.nnodes} Ray pods x 1 FSDP2 rank, "
            "a random Qwen2 of 1 layer on CPU"
        )
        self.first_seen: dict[tuple[int, int], float] = {}

    def overrides(self, inputs: Path | str, checkpoints: Path | str) -> list[str]:
        """main_ppo's overrides: the CPU recipe's, with the demo's step count."""
        from rljob_verl_cpu import recipe

        return recipe.overrides(
            inputs, checkpoints, steps=self.setting.steps, save_freq=self.save_freq,
            nnodes=self.nnodes,
        )  # fmt: skip

    def manifests(self) -> list[dict[str, Any]]:
        """The example with the CPU recipe's overrides and environment, its Ray CPUs, and
        free ports: every node agent's pod shares this machine's loopback."""
        from rljob_verl_cpu import recipe

        docs, job = example_documents(self.example)
        spec = job["spec"]
        spec["args"] = self.overrides(
            f"{self.mount}/{self.job}/inputs", f"{self.mount}/{self.directory}"
        )
        spec["env"] = [{"name": name, "value": value} for name, value in recipe.ENV.items()]
        spec["ray"]["startArgs"] = [f"--num-cpus={recipe.NODE_CPUS}"]  # the GPU: the pod's limit
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(free_port())
        spec["rendezvousPort"], spec["ray"]["port"], spec["ray"]["dashboardPort"] = sorted(ports)
        return docs

    def prepare(self, say: Say) -> None:
        """The model, tokenizer and prompts (one epoch of the run's steps) onto the claim."""
        from rljob_verl_cpu import recipe
        from rljob_verl_cpu.inputs import make_inputs

        make_inputs(self.inputs, train_rows=self.setting.steps * recipe.BATCH)
        shutil.copytree(self.inputs, self.setting.claim / self.job / "inputs")
        say(f"inputs on the claim: {self.job}/inputs (a random Qwen2, its tokenizer, prompts)")

    def progress(self) -> dict[str, Any]:
        """rljob's bridge records the last step verl's loop finished."""
        try:
            path = self.checkpoints / progress.FRAMEWORK_PROGRESS_FILE_NAME
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def attempts(self, attempt: int) -> list[dict[int, dict[str, str]]]:
        """Each attempt's steps (0 to `attempt`) with their metrics, as verl logged them on
        that attempt's head."""
        from rljob_verl_cpu.results import step_metrics

        return [
            step_metrics(self.setting.pod_log(pod_name(self.job, each, 0)))
            for each in range(attempt + 1)
        ]

    def logged(self, attempt: int) -> list[Logged]:
        """The time of a step is when the demo first saw it in the log."""
        from rljob_verl_cpu.results import LOSS, REWARD

        entries = []
        for each, steps in enumerate(self.attempts(attempt)):
            for step, metrics in steps.items():
                seen = self.first_seen.setdefault((each, step), time.time())
                entries.append(
                    Logged(each, step, float(metrics[REWARD]), float(metrics[LOSS]), seen)
                )
        return entries

    def reference(self, say: Say, bar: Bar) -> Reference:
        """The driver's final state and step metrics, uninterrupted, on a local Ray cluster of
        as many nodes as the job's gang, from the cache where an earlier run made them
        (rljob_verl_cpu.reference)."""
        from rljob_verl_cpu import reference as verl_reference
        from rljob_verl_cpu.results import LOSS, REWARD, step_metrics

        def show(log: Path) -> None:
            if shown := step_metrics(log.read_text(errors="replace")):
                step = max(shown)
                bar(step, f"reward {float(shown[step][REWARD]):+.3f}  (reference)")

        say(
            f"reference: the same driver and overrides, uninterrupted, on a local "
            f"{self.nnodes}-node Ray cluster (ray start; run now, after the job, so that "
            "the two never share the CPU, unless an earlier run is cached)"
        )
        started = time.time()
        ran = verl_reference.uninterrupted(
            self.overrides, self.nnodes, self.setting.steps, self.inputs,
            self.setting.out / "reference", show,
        )  # fmt: skip
        note = (
            f"run after the job in {time.time() - started:.0f}s (cached in {ran.folder})"
            if ran.ran_now
            else f"reused from {ran.folder} (an earlier run of this driver, config and test "
            "support)"
        )
        curve = {step: Point(float(m[REWARD]), float(m[LOSS])) for step, m in ran.metrics().items()}
        return Reference(ran.folder, curve, note)

    def compare(self, reference: Reference, status: dict[str, Any]) -> Verdict:
        """Every rank's final weights, optimizer and lr scheduler leaf by leaf (without the
        workers' global RNGs, which nothing in verl seeds), and the exact metrics of every
        step verl logged. A step saved on notice may be missing from the logs: the head holds
        verl's driver once the save returns, before verl logs that step."""
        from rljob_verl_cpu.results import EXACT, differing, trained_state

        steps = self.setting.steps
        actor = self.checkpoints / step_dir_name(steps) / "actor"
        world = self.nnodes  # one rank a pod
        got = trained_state(actor, world)
        want = trained_state(reference.folder / "actor", world)
        same_state = not differing(got, want)
        tensors = sum(1 for value in want.values() if hasattr(value, "shape"))
        logged: dict[int, dict[str, str]] = {}
        for shown in self.attempts(status["attempt"]):  # a step again after a resume: the later
            logged.update({s: {name: m[name] for name in EXACT} for s, m in shown.items()})
        expected = json.loads((reference.folder / "metrics.json").read_text())
        same_metrics = all(expected[str(step)] == metrics for step, metrics in logged.items())
        missing = sorted(set(range(1, steps + 1)) - set(logged))
        on_notice = {r.get("resumedFromStep") for r in status.get("recoveries") or []}
        whole = set(missing) <= on_notice
        unlogged = (
            f"; not logged: step{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(str, missing))} (saved on notice, then the driver was held before "
            "verl logged it)"
            if missing
            else ""
        )
        same = same_state and same_metrics and whole
        return Verdict(
            [
                f"final weights, optimizer and lr scheduler of both ranks ({len(want)} entries, "
                f"{tensors} tensors; the workers' RNG states left out, nothing in verl seeds "
                f"them) bitwise identical to the uninterrupted run: {yes(same_state)}",
                f"{', '.join(EXACT)} of the {len(logged)} steps verl logged identical: "
                f"{yes(same_metrics)}{unlogged}",
                *([] if whole else [f"steps missing from the job's logs: {missing}"]),
            ],
            headline("final weights, optimizer and lr scheduler", same),
            same,
        )


FRAMEWORKS: dict[str, type[DemoFramework]] = {"rljob": RljobDemo, "verl": VerlDemo}
