"""A stand-in for RLinf's entry point in the e2e test: RLinf's command line and checkpoint
layout, none of its training.

It takes Hydra-style `key=value` overrides only, like RLinf's `main_grpo.py`:
`runner.output_dir`, `runner.experiment_name`, `runner.max_steps`, `runner.save_interval`,
`runner.seconds_per_step`, and `runner.resume_dir` (which the operator appends on resume).
It never reads the operator's RLJOB_* variables, except to check that a restarted attempt
(RLJOB_ATTEMPT > 0) was given `runner.resume_dir=<dir>` on its command line, so that the
test proves the framework switch, not the environment, made it resume.

Each step changes a small "model" deterministically (`advance`); every `save_interval`
steps and at the last it writes `<output_dir>/<experiment_name>/checkpoints/global_step_N/`
in the RLinf FSDP layout of before 2026: `actor/` with DCP shards and `.metadata`
(torch.distributed.checkpoint), then `data/data.pt` (torch.save) last. On resume it loads
both and checks they belong to step N. SIGTERM kills it at once (no save on request).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

SIZE = 16
warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.distributed")


def initial_state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return {
        "weight": torch.randn(SIZE, SIZE, generator=generator, dtype=torch.float64),
        "bias": torch.zeros(SIZE, dtype=torch.float64),
        "step": torch.tensor(0, dtype=torch.int64),
    }


def advance(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One "training step": a fixed, non-trivial update of every tensor."""
    step = int(state["step"]) + 1
    weight = torch.tanh(state["weight"] @ state["weight"].T / SIZE) + 1e-3 * step
    bias = state["bias"] * 0.9 + weight.mean(dim=0)
    return {"weight": weight, "bias": bias, "step": torch.tensor(step, dtype=torch.int64)}


def expected_state(steps: int) -> dict[str, torch.Tensor]:
    state = initial_state()
    for _ in range(steps):
        state = advance(state)
    return state


def parse_overrides(argv: list[str]) -> dict[str, str]:
    overrides = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or arg.startswith("-"):
            sys.exit(f"fake_rlinf: expected key=value overrides, got {arg!r}")
        overrides[key] = value
    return overrides


def save(folder: Path, state: dict[str, torch.Tensor], consumed: int) -> None:
    (folder / "actor").mkdir(parents=True, exist_ok=True)
    dcp.save({"model": state}, checkpoint_id=str(folder / "actor"))
    (folder / "data").mkdir(exist_ok=True)
    torch.save({"consumed_samples": consumed}, folder / "data" / "data.pt")  # last, as RLinf
    print(f"fake_rlinf: saved {folder}", flush=True)


def load(folder: Path) -> tuple[dict[str, torch.Tensor], int]:
    state = initial_state()
    holder = {"model": state}
    dcp.load(holder, checkpoint_id=str(folder / "actor"))
    data = torch.load(folder / "data" / "data.pt", weights_only=True)
    return holder["model"], int(data["consumed_samples"])


def main(argv: list[str]) -> int:
    cfg = parse_overrides(argv)
    run_dir = Path(cfg["runner.output_dir"]) / cfg.get("runner.experiment_name", "run")
    checkpoints = run_dir / "checkpoints"
    max_steps = int(cfg["runner.max_steps"])
    interval = int(cfg.get("runner.save_interval", "5"))
    pause = float(cfg.get("runner.seconds_per_step", "0.2"))
    attempt = int(os.environ.get("RLJOB_ATTEMPT", "0"))
    resume_dir = cfg.get("runner.resume_dir")
    if attempt > 0 and not resume_dir:
        print("fake_rlinf: a restarted attempt was not given runner.resume_dir", flush=True)
        return 3
    state, consumed = initial_state(), 0
    if resume_dir:
        folder = Path(resume_dir)
        step = int(str(folder).split("global_step_")[-1])  # as RLinf reads it
        state, consumed = load(folder)
        if int(state["step"]) != step or consumed != 4 * step:
            print(f"fake_rlinf: {folder} does not hold step {step}", flush=True)
            return 4
        print(f"fake_rlinf: resumed from {folder} at step {step}", flush=True)
    while int(state["step"]) < max_steps:
        time.sleep(pause)
        state = advance(state)
        consumed += 4
        step = int(state["step"])
        print(f"fake_rlinf: step {step}/{max_steps}", flush=True)
        if step % interval == 0 or step == max_steps:
            save(checkpoints / f"global_step_{step}", state, consumed)
    print("fake_rlinf: finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
