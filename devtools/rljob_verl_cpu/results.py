"""What a run of verl's driver leaves to compare with another run of it: the metrics it
logged for each step, and every rank's saved weights, optimizer and lr scheduler.

The verl demo and the e2e test of the same driver (tests/e2e/test_verl_main_ppo.py) compare a
preempted job with an uninterrupted run through these.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

# verl's console logger prints one line a step, "step:N - name:value - ...", which Ray
# forwards to the driver's output with the actor's name in front, coloured.
STEP_LINE = re.compile(r"(?:^|\) )step:(\d+) - (.*)", re.M)
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# The metrics of a step that depend on nothing but the data and the weights (no timings).
EXACT = ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean")
REWARD, LOSS = "critic/score/mean", "actor/pg_loss"
STATE_KINDS = ("model", "optim", "extra_state")  # verl's FSDP files: weights, optimizer, lr


def step_metrics(log: str) -> dict[int, dict[str, str]]:
    """step -> every metric verl logged for it, as printed (a value's text compares exactly)."""
    shown: dict[int, dict[str, str]] = {}
    for step, rest in STEP_LINE.findall(COLOUR.sub("", log)):
        shown[int(step)] = dict(part.split(":", 1) for part in rest.split(" - ") if ":" in part)
    return shown


def state_files(actor: Path, world: int = 2) -> list[Path]:
    """The files of a `global_step_N/actor` folder that hold the trained state of each rank."""
    return [
        actor / f"{kind}_world_size_{world}_rank_{rank}.pt"
        for rank in range(world)
        for kind in STATE_KINDS
    ]


def trained_state(actor: Path, world: int = 2) -> dict[str, Any]:
    """Every rank's weights, optimizer and lr scheduler in a `global_step_N/actor` folder,
    leaf by leaf, without the worker processes' global RNG states: nothing in verl seeds
    those, so they differ between two uninterrupted runs, and nothing trained depends on
    them (docs/frameworks.md)."""
    leaves: dict[str, Any] = {}
    mesh_log = logging.getLogger("torch.distributed.device_mesh")
    level = mesh_log.level
    # DTensors and their mesh unpickled without a process group: a warning each, harmless.
    mesh_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for path in state_files(actor, world):
                # verl's own files, RNG states among them: not weights only.
                leaves.update(flatten(torch.load(path, weights_only=False), f"{path.stem}."))
    finally:
        mesh_log.setLevel(level)
    return {name: value for name, value in leaves.items() if ".rng." not in name}


def differing(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """The leaves in which two states differ bit for bit (all of them if their names differ)."""
    if sorted(got) != sorted(want):
        return sorted(set(got) ^ set(want))
    return [name for name, value in want.items() if not _same(got[name], value)]


def _same(got: Any, want: Any) -> bool:
    if torch.is_tensor(want):
        return torch.is_tensor(got) and torch.equal(got, want)
    return bool(got == want)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts, lists and tuples as one level of dotted names; DTensors as their local
    shard, numpy arrays as tensors, so that every leaf compares exactly."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        if hasattr(value, "to_local"):
            value = value.to_local()
        elif isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        return {prefix.rstrip("."): value}
    out: dict[str, Any] = {}
    for key, item in items:
        out.update(flatten(item, f"{prefix}{key}."))
    return out
