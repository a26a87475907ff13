"""What the trainer's notice check costs per GRPO step: the real trainer (FSDP2), its real
steps, with the rollout's per-token check done three ways, interleaved step by step:

- none:      no check during the rollout (what a trainer without save on notice costs);
- blocking:  one blocking all_reduce(MAX) before every token (the trainer before #42);
- pipelined: the trainer's own check (`Trainer._before_token`): the vote posted before each
             token's forward pass and read before the next, so the round trip overlaps it.

    python benchmarks/notice_check.py [--ranks 2,8] [--steps 12] [--device cpu|cuda]

Run plainly, it starts itself under torchrun once per rank count; each run's rank 0 prints a
row: the median step time of each way and the ratio to `none`. With no notice, every way
makes the same decisions, so the steps train the same; only the time differs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAYS = ("none", "blocking", "pipelined")


def _launch(ranks: int, argv: list[str]) -> dict:
    """Run the worker under torchrun with `ranks` ranks; rank 0's result row."""
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), f"--nproc_per_node={ranks}", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=localhost:{port}", __file__, "--worker", *argv]  # fmt: skip
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True)  # fmt: skip
    rows = [
        line[len("RESULT ") :] for line in done.stdout.splitlines() if line.startswith("RESULT ")
    ]
    if done.returncode != 0 or not rows:
        raise SystemExit(f"{ranks} ranks failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(rows[0])


def _worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from rljob_trainer.backends import backend
    from rljob_trainer.config import load_config
    from rljob_trainer.deadline import Phase
    from rljob_trainer.stop import agree_max
    from rljob_trainer.train import init_distributed

    env = init_distributed(args.device)
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"runner.output_dir={out}", f"runner.device={args.device}",
            f"model.d_model={args.d_model}", f"model.n_layers={args.n_layers}",
            f"model.n_heads={max(2, args.d_model // 64)}", f"model.d_ff={4 * args.d_model}",
            f"model.max_seq_len={args.max_new_tokens + 8}",
            f"algorithm.max_new_tokens={args.max_new_tokens}", "algorithm.update_epochs=1",
        ]  # fmt: skip
        trainer = backend("fsdp")(load_config(None, overrides, env={}), env)
        trainer.rng.reseed(0)
        pipelined = trainer._before_token
        ways = {
            "none": lambda tokens_done: None,
            "blocking": lambda tokens_done: agree_max(
                [trainer._decide(Phase.ROLLOUT, tokens_done)]
            ),
            "pipelined": pipelined,
        }
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        for step in range(args.warmup + args.steps):
            for way in WAYS:  # interleaved, so that the machine's drift hits every way alike
                trainer._before_token = ways[way]
                dist.barrier()
                started = time.perf_counter()
                trainer.train_step()
                elapsed = time.perf_counter() - started
                if step >= args.warmup:
                    times[way].append(elapsed)
        trainer.checkpoints.finish()
    if dist.get_rank() == 0:
        medians = {way: statistics.median(times[way]) for way in WAYS}
        row = {"ranks": dist.get_world_size(), "device": env.device.type,
               "tokens": args.max_new_tokens, "steps": args.steps,
               **{f"{way}_s": medians[way] for way in WAYS},
               **{f"{way}_vs_none": medians[way] / medians["none"] for way in WAYS[1:]},
               }  # fmt: skip
        print("RESULT " + json.dumps(row), flush=True)
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,8")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return 0
    argv = [f"--steps={args.steps}", f"--warmup={args.warmup}", f"--device={args.device}",
            f"--d-model={args.d_model}", f"--n-layers={args.n_layers}",
            f"--max-new-tokens={args.max_new_tokens}"]  # fmt: skip
    print(f"FSDP2 d{args.d_model} L{args.n_layers}, {args.max_new_tokens} tokens a rollout, "
          f"median of {args.steps} steps per way, interleaved\n")  # fmt: skip
    print("| ranks | device | step, none | blocking | pipelined | blocking/none | pipelined/none |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for ranks in (int(r) for r in args.ranks.split(",")):
        row = _launch(ranks, argv)
        print(f"| {ranks} | {row['device']} | {row['none_s'] * 1000:.1f} ms "
              f"| {row['blocking_s'] * 1000:.1f} ms | {row['pipelined_s'] * 1000:.1f} ms "
              f"| {row['blocking_vs_none']:.3f} | {row['pipelined_vs_none']:.3f} |",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
