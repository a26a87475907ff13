"""How long a checkpoint stalls training (synchronous vs `dcp.async_save`), and how long a resume
load takes, as a function of model size: the real trainer (2 ranks, CPU/gloo), FSDP2 or, with
`--backend megatron`, megatron-core with tensor parallel 2 (its saves are synchronous only).
`--device cuda` runs the ranks on GPUs (NCCL); `benchmarks/trainer_gpu.py` calls `_bench_size`
in one process on one GPU.

    python benchmarks/trainer_checkpoint.py [--backend fsdp|megatron] [--repeats 5] \
        [--sizes 128x2,256x4,384x8] [--device cpu|cuda]

Run plainly, it starts itself under torchrun with two ranks; rank 0 prints a table of medians.
The stall is the time the training loop is blocked in `CheckpointManager.save`: for async saving,
staging a CPU copy of the shards, gathering the full model, and waiting for a previous save
still in flight; between saves the benchmark trains `--steps-between` real GRPO steps.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rljob_trainer.train import DistEnv

SIZES = "128x2,256x4,384x8"  # d_model x n_layers
MODES = {"fsdp": ("sync", "async"), "megatron": ("sync",)}


def _launch(argv: list[str]) -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [
        str(torchrun),
        "--nproc_per_node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=localhost:{port}",
        __file__,
        *argv,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.call(command, env=env)


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _bench_size(
    d_model: int, n_layers: int, args: argparse.Namespace, root: Path, env: DistEnv
) -> dict:
    """Medians for one model size; `env` from `init_distributed` (any number of ranks)."""
    import torch.distributed as dist
    from rljob_trainer.backends import backend
    from rljob_trainer.config import load_config

    result: dict = {"size": f"d{d_model} L{n_layers}", "async_stall": None}
    megatron = args.backend == "megatron"
    for mode in getattr(args, "modes", None) or MODES[args.backend]:
        out = root / f"{d_model}x{n_layers}-{mode}"
        overrides = [
            f"runner.output_dir={out}",
            f"runner.device={env.device.type}",
            f"runner.async_save={mode == 'async'}",
            "runner.max_num_checkpoints=2",
            f"model.d_model={d_model}",
            f"model.n_layers={n_layers}",
            f"model.n_heads={max(2, d_model // 64)}",
            f"model.d_ff={4 * d_model}",
            f"runner.backend={args.backend}",
        ]
        if megatron:
            overrides.append("megatron.tensor_model_parallel_size=2")
        trainer = backend(args.backend)(load_config(None, overrides, env={}), env)
        trainer.rng.reseed(0)
        local = sum(p.numel() for p in trainer.policy.parameters())
        # FSDP: DTensors of the global sizes; Megatron: this rank's shard, summed over the ranks
        # (the norms, replicated over TP, are counted twice: a fraction of a percent).
        result["params"] = _summed(local) if megatron else local
        stalls, step_times, step = [], [], 0
        for _ in range(args.repeats):
            for _ in range(args.steps_between):
                started = time.perf_counter()
                trainer.train_step()
                step += 1
                trainer.train_state.step = step
                trainer.step_boundary(False)
                step_times.append(time.perf_counter() - started)
            stalls.append(trainer.checkpoints.save(step))
        trainer.checkpoints.finish()
        result[f"{mode}_stall"] = statistics.median(stalls)
        result[f"{mode}_stalls"] = stalls
        # The sync steps' median; async steps may overlap a save still being written.
        result["step_time" if mode == "sync" else f"{mode}_step_time"] = statistics.median(
            step_times
        )
        folder = trainer.checkpoints.folder(step)
        result["bytes"] = _folder_bytes(folder)
        if mode == "sync":
            loads = []
            for _ in range(args.repeats):
                dist.barrier()
                started = time.perf_counter()
                trainer.checkpoints.load(folder, allow_world_size_change=False)
                loads.append(time.perf_counter() - started)
            result["load"] = statistics.median(loads)
        dist.barrier()
        if dist.get_rank() == 0:
            shutil.rmtree(out)
        if megatron:
            from megatron.core import parallel_state

            parallel_state.destroy_model_parallel()  # the next size splits its ranks anew
    return result


def _summed(value: int) -> int:
    import torch
    import torch.distributed as dist

    total = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(total)
    return int(total.item())


def _worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from rljob_trainer.train import init_distributed

    env = init_distributed(args.device)
    rank = dist.get_rank()
    root = Path(args.workdir)
    results = []
    for spec in args.sizes.split(","):
        d_model, n_layers = (int(x) for x in spec.split("x"))
        results.append(_bench_size(d_model, n_layers, args, root, env))
    if rank == 0:
        where = "CPU/gloo" if env.device.type == "cpu" else "CUDA/NCCL"
        print(
            f"\n{args.backend}, 2 ranks, {where}, median of {args.repeats} checkpoints, "
            f"{args.steps_between} GRPO steps between checkpoints\n"
        )
        print(
            "| model | params | checkpoint | step | stall sync | stall async | load |\n"
            "|---|---|---|---|---|---|---|"
        )
        for r in results:
            print(
                f"| {r['size']} | {r['params'] / 1e6:.1f} M | {r['bytes'] / 2**20:.0f} MiB "
                f"| {r['step_time']:.2f} s | {r['sync_stall']:.2f} s "
                f"| {_seconds(r['async_stall'])} "
                f"| {r['load']:.2f} s |"
            )
    dist.destroy_process_group()


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(MODES), default="fsdp")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps-between", type=int, default=2)
    parser.add_argument("--sizes", default=SIZES, help="d_model x n_layers, comma-separated")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if "RANK" in os.environ:
        _worker(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="rljob-bench-") as workdir:
        return _launch([*sys.argv[1:], f"--workdir={workdir}"])


if __name__ == "__main__":
    sys.exit(main())
