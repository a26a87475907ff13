"""The uninterrupted run of verl's own driver that a preempted one is compared with.

The verl demo (`make demo-verl`) and the e2e test of the same driver
(tests/e2e/test_verl_main_ppo.py) each need `python -m verl.trainer.main_ppo` run to its end
without a preemption, on a local Ray cluster of the job's size: a minute or two of verl
starting and training on two cores. Its numbers depend only on the overrides, the CPU recipe's
environment, the gang's size, this test support's source (which makes the inputs, the rollout
and the sampler) and the versions of the libraries that compute it, so it is kept by those
(rljob_testenv.cached): every rank's state files (`actor/`) and the exact metrics of every step
(`metrics.json`).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rljob_testenv import cached, scenario
from rljob_testenv.localray import local_ray_cluster

from . import recipe
from .results import EXACT, state_files, step_metrics

SOURCES = Path(__file__).resolve().parent  # this package's modules: they make the numbers
VERSIONS = ("verl", "ray", "torch", "transformers")
METRICS = "metrics.json"

# (inputs folder, checkpoint folder) -> main_ppo's overrides
Overrides = Callable[[Path | str, Path | str], list[str]]


@dataclass(frozen=True)
class Reference:
    folder: Path  # actor/ (every rank's state files) and metrics.json
    ran_now: bool  # False: found in the cache

    @property
    def actor(self) -> Path:
        return self.folder / "actor"

    def metrics(self) -> dict[int, dict[str, str]]:
        """step -> the EXACT metrics verl logged for it."""
        stored = json.loads((self.folder / METRICS).read_text())
        return {int(step): shown for step, shown in stored.items()}


def uninterrupted(
    overrides: Overrides,
    nnodes: int,
    steps: int,
    inputs: Path,
    work: Path,
    while_running: Callable[[Path], None] | None = None,
) -> Reference:
    """The reference from the cache, or run now in `work` on a local `nnodes`-node Ray cluster
    with the inputs in `inputs` (`while_running(log)` is called every half second then)."""
    parts = [overrides("IN", "OUT"), recipe.ENV, nnodes]
    key = cached.inputs_key(parts, [SOURCES], VERSIONS)

    def run(folder: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        log = work / "reference.log"
        node_args = (f"--num-cpus={recipe.NODE_CPUS}", f"--num-gpus={recipe.NODE_GPUS}")
        with local_ray_cluster(nnodes, work / "ray", node_args, recipe.ENV) as (address, env):
            argv = [sys.executable, "-m", "verl.trainer.main_ppo"]
            argv += overrides(inputs, work / "ckpt")
            scenario.run_watched(
                argv, {**env, "RAY_ADDRESS": address}, log, cwd=work, timeout=1800,
                while_running=(lambda: while_running(log)) if while_running else None,
            )  # fmt: skip
        (folder / "actor").mkdir()
        for path in state_files(work / "ckpt" / f"global_step_{steps}" / "actor", nnodes):
            shutil.copy(path, folder / "actor" / path.name)
        shown = step_metrics(log.read_text(errors="replace"))
        exact = {step: {name: shown[step][name] for name in EXACT} for step in shown}
        (folder / METRICS).write_text(json.dumps(exact, indent=1))

    folder, ran_now = cached.run_once("verl", key, run)
    return Reference(folder, ran_now)
