"""The trainer on one GPU (world size 1, `cpu:gloo,cuda:nccl`), or on CPU where there is none:
bit-exact resume, determinism, step time, checkpoint cost and the per-token notice check.

    python benchmarks/trainer_gpu.py [--quick] [--out result.json] [--parts resume,notice,ckpt] \
        [--device auto|cpu|cuda] [--sizes 256x4,1024x8,2048x20] [--steps 40] ...

`--quick` picks tiny sizes for a CPU smoke test; `benchmarks/gpu_run.sh` runs it on a lent GPU
machine.
Each part runs in a child process of its own with a hard timeout, so that a crash or a hang in
one still leaves the others' results; the JSON (`--out`) is written after every part.

- resume: the real trainer (`python -m rljob_trainer`, one process) twice uninterrupted to
  `--steps` steps, and once stopped by SIGTERM after about step `--stop-after` (it saves on
  the notice and exits 75), then resumed to the end. Compares the final `model.safetensors`
  and every tensor of the final DCP checkpoint (optimizer state included) bitwise: resumed vs
  uninterrupted (bit-exact resume), and uninterrupted vs uninterrupted (determinism; on CUDA
  the trainer asks for deterministic algorithms with warn_only, so the warnings are listed).
- ckpt: `trainer_checkpoint._bench_size` per model size (d_model x n_layers): median step time,
  sync and async save stall, resume load time, checkpoint bytes and GB/s (bytes over the stall
  or load time; a load right after the save reads the page cache). A size is skipped when the
  time box or the free disk would not hold it.
- notice: the per-token stop vote (`stop.PendingMax`, an all_reduce(MAX) of a CPU tensor, so
  gloo even on a GPU run), timed alone, against an NCCL all_reduce of a CUDA tensor, and in
  real train steps (no check vs the trainer's pipelined check), in microseconds per token.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from rljob_contract import EXIT_CHECKPOINTED_ON_REQUEST

HERE = Path(__file__).resolve().parent
PARTS = ("resume", "notice", "ckpt")

# (full, --quick) defaults
DEFAULTS: dict[str, tuple[Any, Any]] = {
    "resume_model": ("256x4", "64x2"),
    "steps": (40, 8),
    "save_interval": (10, 3),
    "stop_after": (17, 4),
    "sizes": ("256x4,1024x8,2048x20", "64x2,128x2,192x3"),
    "repeats": (3, 2),
    "notice_model": ("256x4", "64x2"),
    "notice_steps": (10, 3),
    "notice_tokens": (16, 8),
    "timeout_resume": (100, 300),
    "timeout_ckpt": (220, 300),
    "timeout_notice": (45, 200),
}


def model_overrides(spec: str) -> list[str]:
    """`d_model x n_layers` -> the trainer's model keys, as trainer_checkpoint.py sizes them."""
    d_model, n_layers = (int(x) for x in spec.split("x"))
    return [
        f"model.d_model={d_model}",
        f"model.n_layers={n_layers}",
        f"model.n_heads={max(2, d_model // 64)}",
        f"model.d_ff={4 * d_model}",
    ]


def estimated_params(spec: str) -> int:
    d_model, n_layers = (int(x) for x in spec.split("x"))
    return 12 * d_model * d_model * n_layers


def resolve_device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# ------------------------------------------------------------------------------ part: resume
def _trainer_env() -> dict[str, str]:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_") and k not in drop}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class TrainerRun:
    """One `python -m rljob_trainer` process writing under `output_dir`, logging to a file."""

    def __init__(self, output_dir: Path, overrides: list[str], log_name: str) -> None:
        output_dir.mkdir(parents=True, exist_ok=True)
        self.output_dir = output_dir
        self.log_path = output_dir / f"{log_name}.log"
        command = [
            sys.executable,
            "-m",
            "rljob_trainer",
            f"runner.output_dir={output_dir}",
            *overrides,
        ]
        self.started = time.perf_counter()
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_trainer_env(),
            )
        self.wall_s: float | None = None

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "grpo_tiny" / "checkpoints"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def progress(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.checkpoint_dir / "progress.json").read_text())
        except (OSError, ValueError):
            return None

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(
                f"{self.log_path.name} ran past {timeout:.0f} s:\n{self.log()[-2000:]}"
            ) from None
        if self.wall_s is None:
            self.wall_s = time.perf_counter() - self.started
        return code

    def wait_for_step(self, step: int, timeout: float) -> int | None:
        """The step progress.json shows once it is >= `step`; None if the run exited first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            progress = self.progress()
            if progress and progress["step"] >= step:
                return int(progress["step"])
            if self.process.poll() is not None:
                return None
            time.sleep(0.01)
        raise RuntimeError(f"step {step} not reached in {timeout:.0f} s:\n{self.log()[-2000:]}")

    def metrics(self) -> list[dict[str, Any]]:
        path = self.output_dir / "grpo_tiny" / "metrics.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def summary(self, code: int) -> dict[str, Any]:
        step_times = [e["step_time"] for e in self.metrics() if "step_time" in e]
        return {
            "exit_code": code,
            "wall_s": self.wall_s,
            "median_step_s": statistics.median(step_times) if step_times else None,
            "warnings": warning_lines(self.log()),
            **(
                {}
                if code in (0, EXIT_CHECKPOINTED_ON_REQUEST)
                else {"log_tail": self.log()[-3000:]}
            ),
        }


def warning_lines(log: str, limit: int = 20) -> list[str]:
    """Distinct warning lines (determinism ones first), without timestamps and rank prefixes."""
    found: list[str] = []
    for line in log.splitlines():
        if re.search(r"warn|determinis", line, re.IGNORECASE):
            line = re.sub(r"^\[rank\d+\] [\d\-: ,]+", "", line).strip()
            if line not in found:
                found.append(line)
    found.sort(key=lambda line: "determinis" not in line.lower())
    return found[:limit]


def compare_tensors(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Bitwise equality of two name -> tensor dicts, and where not: which, and by how much."""
    import torch

    names = sorted(set(a) | set(b))
    missing = [n for n in names if n not in a or n not in b]
    differ: dict[str, float | None] = {}
    for name in names:
        if name in missing:
            continue
        x, y = a[name], b[name]
        if not isinstance(x, torch.Tensor):
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            differ[name] = None
        elif not torch.equal(x, y):
            diff = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
            differ[name] = diff
    worst = [d for d in differ.values() if d is not None]
    return {
        "equal": not differ and not missing,
        "tensors": sum(isinstance(a[n], torch.Tensor) for n in names if n not in missing),
        "missing": missing,
        "differ": len(differ),
        "max_abs_diff": max(worst) if worst else (None if differ else 0.0),
        "differing": dict(sorted(differ.items(), key=lambda kv: -(kv[1] or 0.0))[:20]),
    }


def final_state(run: TrainerRun, step: int) -> dict[str, dict[str, Any]]:
    """The final checkpoint's model.safetensors, and every tensor of its DCP shards."""
    from rljob_trainer.dcp_read import read_dcp_tensors
    from safetensors.torch import load_file

    folder = run.checkpoint_dir / f"global_step_{step}"
    return {
        "weights": load_file(str(folder / "actor" / "model" / "model.safetensors")),
        "dcp": read_dcp_tensors(folder / "actor", lambda key: True, {}),
    }


def metric_steps_differing(a: list[dict], b: list[dict]) -> list[int]:
    from rljob_trainer.metrics import EXACT_METRICS

    got = {e["step"]: [e.get(k) for k in EXACT_METRICS] for e in a}
    want = {e["step"]: [e.get(k) for k in EXACT_METRICS] for e in b}
    return sorted(s for s in set(got) | set(want) if got.get(s) != want.get(s))


def part_resume(args: argparse.Namespace, workdir: Path, write: Any) -> dict[str, Any]:
    steps, stop_after = args.steps, args.stop_after
    overrides = [
        f"runner.device={args.device}",
        f"runner.max_steps={steps}",
        f"runner.save_interval={args.save_interval}",
        "runner.max_num_checkpoints=2",
        *model_overrides(args.resume_model),
    ]
    result: dict[str, Any] = {
        "model": args.resume_model,
        "params": None,
        "steps": steps,
        "save_interval": args.save_interval,
    }
    timeout = args.timeout_resume
    # The two uninterrupted runs and the interrupted one at once: they share nothing but the GPU.
    base_a = TrainerRun(workdir / "base_a", overrides, "run")
    base_b = TrainerRun(workdir / "base_b", overrides, "run")
    stopped = TrainerRun(workdir / "stopped", overrides, "stopped")
    reached = stopped.wait_for_step(stop_after, timeout)
    if reached is not None:
        stopped.process.send_signal(signal.SIGTERM)
    result["sigterm_after_step"] = reached
    stopped_code = stopped.wait(timeout)
    progress = stopped.progress() or {}
    result["stopped"] = {
        **stopped.summary(stopped_code),
        "progress_step": progress.get("step"),
        "progress_status": progress.get("status"),
        "stop_line": next(
            (line for line in stopped.log().splitlines() if "stopping on request" in line), None
        ),
    }
    write(result)
    resumed = TrainerRun(workdir / "stopped", overrides, "resumed")
    codes = {"a": base_a.wait(timeout), "b": base_b.wait(timeout)}
    resumed_code = resumed.wait(timeout)
    match = re.search(r"resumed from (\S+) at step (\d+)", resumed.log())
    result["resumed"] = {
        **resumed.summary(resumed_code),
        "resume_step": int(match.group(2)) if match else None,
    }
    result["uninterrupted"] = {
        name: run.summary(codes[name]) for name, run in (("a", base_a), ("b", base_b))
    }
    write(result)
    failed = {"a": codes["a"], "b": codes["b"], "resumed": resumed_code}
    if any(code != 0 for code in failed.values()):
        logs = {"a": base_a, "b": base_b, "resumed": resumed}
        raise RuntimeError(
            f"a run failed: {failed}\n"
            + "\n".join(f"--- {n}:\n{logs[n].log()[-1500:]}" for n, c in failed.items() if c)
        )
    a, b, r = (final_state(run, steps) for run in (base_a, base_b, resumed))
    result["params"] = sum(t.numel() for t in a["weights"].values())
    result["resume_vs_uninterrupted"] = {
        "weights": compare_tensors(a["weights"], r["weights"]),
        "dcp_all_tensors": compare_tensors(a["dcp"], r["dcp"]),
        "metric_steps_differing": metric_steps_differing(base_a.metrics(), resumed.metrics()),
    }
    result["uninterrupted_a_vs_b"] = {
        "weights": compare_tensors(a["weights"], b["weights"]),
        "dcp_all_tensors": compare_tensors(a["dcp"], b["dcp"]),
        "metric_steps_differing": metric_steps_differing(base_a.metrics(), base_b.metrics()),
    }
    result["resume_vs_uninterrupted_b"] = {
        "weights": compare_tensors(b["weights"], r["weights"])["equal"]
    }
    result["stop_exit_code_ok"] = stopped_code == EXIT_CHECKPOINTED_ON_REQUEST
    return result


# -------------------------------------------------------------------------------- part: ckpt
def _disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _sha256_gbps(megabytes: int = 512) -> float:
    """The manifest hashes every file of a save (sync: while training waits)."""
    data = os.urandom(1 << 20) * megabytes
    started = time.perf_counter()
    hashlib.sha256(data).hexdigest()
    return megabytes * 2**20 / (time.perf_counter() - started) / 1e9


def part_ckpt(args: argparse.Namespace, workdir: Path, write: Any) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from rljob_trainer.train import init_distributed

    sys.path.insert(0, str(HERE))
    from trainer_checkpoint import _bench_size

    env = init_distributed(args.device)
    cuda = env.device.type == "cuda"
    result: dict[str, Any] = {
        "repeats": args.repeats,
        "steps_between": 2,
        "workdir": str(workdir),
        "disk_free_GB": _disk_free(workdir) / 1e9,
        "sha256_GBps": _sha256_gbps(64 if args.quick else 512),
        "sizes": [],
        "skipped": [],
    }
    write(result)
    started = time.perf_counter()
    # Seconds per (parameter x work unit) of the last size: a size's work is about two model
    # builds per mode plus, per repeat, a sync save, an async save and a load. Extrapolated
    # only from a size at least 1/20 of the next one, and discounted (0.6) for the fixed costs
    # in the smaller size's time: a guard against hopeless sizes only; the part's hard
    # timeout is the backstop, and every finished size is kept.
    rate: float | None = None
    last_params = 0
    for spec in args.sizes.split(","):
        params = estimated_params(spec)
        repeats = args.repeats if params <= args.big_params else min(args.repeats, 2)
        units = 3 * repeats + 4
        # Up to `repeats` (at most 3: two kept, one being written) checkpoints on disk; fp32
        # weights + 2 Adam moments in DCP, fp32 weights again in model.safetensors: 16 B/param.
        need = min(repeats, 3) * 16 * params + 2 * 10**9
        folder = workdir
        if _disk_free(workdir) < need:
            # tmpfs instead (page cache either way for the load): the checkpoints in memory
            # beside the async save's CPU staging copy and the gathered full model.
            shm = Path("/dev/shm")
            room = _mem_available() - (need + 24 * params + 8 * 10**9)
            if not (shm.is_dir() and _disk_free(shm) >= need and room > 0):
                result["skipped"].append({"size": spec, "why": f"disk: needs {need / 1e9:.0f} GB"})
                continue
            folder = Path(tempfile.mkdtemp(prefix="rljob-gpu-ckpt-", dir=shm))
        elapsed = time.perf_counter() - started
        estimate = 0.0
        if rate is not None and 20 * last_params >= params:
            estimate = 0.6 * rate * params * units
        if elapsed + estimate > args.ckpt_box:
            result["skipped"].append(
                {
                    "size": spec,
                    "why": f"time box {args.ckpt_box:.0f} s: "
                    f"{elapsed:.0f} s gone, ~{estimate:.0f} s estimated",
                }
            )
            if folder != workdir:
                shutil.rmtree(folder, ignore_errors=True)
            continue
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        size_started = time.perf_counter()
        d_model, n_layers = (int(x) for x in spec.split("x"))
        row: dict[str, Any] = {}
        try:
            for mode in ("sync", "async"):  # apart, so that a failing async save keeps sync's
                bench_args = argparse.Namespace(
                    backend="fsdp", repeats=repeats, steps_between=2, modes=(mode,)
                )
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
                try:
                    row.update(
                        {
                            k: v
                            for k, v in _bench_size(
                                d_model, n_layers, bench_args, folder, env
                            ).items()
                            if v is not None or k not in row
                        }
                    )
                except Exception:
                    if mode == "sync":
                        raise
                    traceback.print_exc()
                    row["async_error"] = traceback.format_exc()[-2000:]
                    row["async_stalls"] = [None]
                    shutil.rmtree(folder / f"{spec}-async", ignore_errors=True)
        finally:
            if folder != workdir:
                shutil.rmtree(folder, ignore_errors=True)
        row["repeats"] = repeats
        row["folder"] = str(folder)
        row["wall_s"] = time.perf_counter() - size_started
        rate = row["wall_s"] / row["params"] / units
        last_params = row["params"]
        row["GB"] = row["bytes"] / 1e9
        row["sync_save_GBps"] = row["bytes"] / 1e9 / row["sync_stall"]
        row["load_GBps"] = row["bytes"] / 1e9 / row["load"]
        row["async_first_stall"] = row["async_stalls"][0]
        if cuda:
            row["peak_gpu_mem_GB"] = torch.cuda.max_memory_allocated() / 1e9
        result["sizes"].append(row)
        write(result)
    dist.destroy_process_group()
    return result


# ------------------------------------------------------------------------------ part: notice
def _per_call_us(fn: Any, calls: int) -> float:
    for _ in range(min(50, calls)):
        fn()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def part_notice(args: argparse.Namespace, workdir: Path, write: Any) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from rljob_trainer.backends import backend
    from rljob_trainer.config import load_config
    from rljob_trainer.stop import PendingMax
    from rljob_trainer.train import init_distributed

    env = init_distributed(args.device)
    calls = 300 if args.quick else 2000
    result: dict[str, Any] = {"calls": calls}
    # The trainer's vote: a CPU int32 tensor, which `cpu:gloo,cuda:nccl` sends through gloo.
    result["pendingmax_cpu_gloo_us"] = _per_call_us(lambda: PendingMax([0]).result(), calls)
    if env.device.type == "cuda":
        vote = torch.zeros(1, dtype=torch.int32, device=env.device)

        def nccl_vote() -> None:
            dist.all_reduce(vote, op=dist.ReduceOp.MAX)
            vote.item()  # the decision is needed on the host

        result["allreduce_cuda_nccl_item_us"] = _per_call_us(nccl_vote, calls)
    write(result)
    tokens = args.notice_tokens
    overrides = [
        f"runner.output_dir={workdir}",
        f"runner.device={args.device}",
        *model_overrides(args.notice_model),
        f"model.max_seq_len={tokens + 8}",
        f"algorithm.max_new_tokens={tokens}",
        "algorithm.update_epochs=1",
    ]
    trainer = backend("fsdp")(load_config(None, overrides, env={}), env)
    trainer.rng.reseed(0)
    ways = {"none": lambda tokens_done: None, "pipelined": trainer._before_token}
    times: dict[str, list[float]] = {way: [] for way in ways}
    for step in range(2 + args.notice_steps):
        for way, check in ways.items():  # interleaved, so that drift hits both alike
            trainer._before_token = check
            started = time.perf_counter()
            trainer.train_step()
            if step >= 2:
                times[way].append(time.perf_counter() - started)
    trainer.checkpoints.finish()
    medians = {way: statistics.median(t) for way, t in times.items()}
    result.update(
        {
            "model": args.notice_model,
            "tokens_per_rollout": tokens,
            "steps": args.notice_steps,
            "step_none_s": medians["none"],
            "step_pipelined_s": medians["pipelined"],
            "pipelined_us_per_token": (medians["pipelined"] - medians["none"]) / tokens * 1e6,
        }
    )
    write(result)
    dist.destroy_process_group()
    return result


PART_FUNCTIONS = {"resume": part_resume, "notice": part_notice, "ckpt": part_ckpt}


# ------------------------------------------------------------------------------------ driver
def run_part_child(args: argparse.Namespace) -> int:
    """In the child: run one part, writing its result JSON (also partially, as it goes)."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.part_out)
    latest: dict[str, Any] = {}

    def write(result: dict[str, Any]) -> None:
        latest.clear()
        latest.update(result)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(out)

    try:
        result = PART_FUNCTIONS[args.part](args, Path(args.workdir), write)
    except Exception:
        traceback.print_exc()
        write({**latest, "traceback": traceback.format_exc()[-4000:]})
        return 1
    write({**result, "complete": True})
    return 0


def _child_argv(args: argparse.Namespace, part: str, workdir: Path, part_out: Path) -> list[str]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        f"--part={part}",
        f"--part-out={part_out}",
        f"--workdir={workdir}",
        f"--device={args.device}",
    ]
    if args.quick:
        argv.append("--quick")
    for key in DEFAULTS:
        argv.append(f"--{key.replace('_', '-')}={getattr(args, key)}")
    argv += [f"--ckpt-box={args.ckpt_box}", f"--big-params={args.big_params}"]
    return argv


def run_part(args: argparse.Namespace, part: str, root: Path) -> dict[str, Any]:
    workdir = root / part
    workdir.mkdir(parents=True)
    part_out = root / f"{part}.json"
    timeout = getattr(args, f"timeout_{part}")
    started = time.perf_counter()
    print(f"== {part} (time box {timeout} s)", flush=True)
    # A session of its own: the child and the trainer runs it starts end together.
    process = subprocess.Popen(_child_argv(args, part, workdir, part_out), start_new_session=True)
    error = None
    try:
        code = process.wait(timeout=timeout)
        if code != 0:
            error = f"exited with {code}"
    except subprocess.TimeoutExpired:
        error = f"killed after its time box of {timeout} s"
    except Terminated as exc:
        error = str(exc)
    finally:
        with _ignored(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # and whatever it left running
        process.wait()
    try:
        result = json.loads(part_out.read_text())
    except (OSError, ValueError):
        result = {}
    result["part_wall_s"] = time.perf_counter() - started
    if error:
        result["error"] = error
    print(
        f"== {part}: {'ERROR ' + error if error else 'done'} in {result['part_wall_s']:.1f} s",
        flush=True,
    )
    shutil.rmtree(workdir, ignore_errors=True)
    for leftover in Path("/dev/shm").glob("rljob-gpu-ckpt-*"):  # a killed ckpt's tmpfs folder
        shutil.rmtree(leftover, ignore_errors=True)
    return result


class Terminated(Exception):
    """SIGTERM (`timeout` in gpu_run.sh): stop the part running, write what there is."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated(f"terminated by signal {signum}")


class _ignored:
    def __init__(self, *exceptions: type[BaseException]) -> None:
        self.exceptions = exceptions

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        return kind is not None and issubclass(kind, self.exceptions)


def meta(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device,
        "host_cpus": os.cpu_count(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    if device == "cuda":
        try:
            props = torch.cuda.get_device_properties(0)
            info.update(
                {
                    "gpu": props.name,
                    "gpu_mem_GB": props.total_memory / 1e9,
                    "cuda": torch.version.cuda,
                    "nccl": str(torch.cuda.nccl.version()),
                }
            )
        except Exception as exc:
            info["gpu_info_error"] = repr(exc)
    return info


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _error(part: dict[str, Any]) -> str:
    return f" ERROR: {part['error']}" if "error" in part else ""


def print_summary(report: dict[str, Any]) -> None:
    print("\n# trainer_gpu summary")
    print(json.dumps(report["meta"]))
    resume = report.get("resume", {})
    if resume:
        print(
            f"\n## resume ({resume.get('model')}, {resume.get('params')} params, "
            f"{resume.get('steps')} steps){_error(resume)}"
        )
        stopped, resumed = resume.get("stopped", {}), resume.get("resumed", {})
        unint = resume.get("uninterrupted", {})
        print(
            f"SIGTERM after step {resume.get('sigterm_after_step')}: exit "
            f"{stopped.get('exit_code')} at step {stopped.get('progress_step')} "
            f"({stopped.get('progress_status')}); resumed at step "
            f"{resumed.get('resume_step')}, exit {resumed.get('exit_code')}; uninterrupted "
            f"exits {[v.get('exit_code') for v in unint.values()]}"
        )
        print(
            "| comparison | weights equal | DCP tensors equal | differing | max abs diff "
            "| metric steps differing |\n|---|---|---|---|---|---|"
        )
        for name in ("resume_vs_uninterrupted", "uninterrupted_a_vs_b"):
            c = resume.get(name)
            if c:
                print(
                    f"| {name} | {c['weights']['equal']} | {c['dcp_all_tensors']['equal']} "
                    f"| {c['dcp_all_tensors']['differ']} "
                    f"| {_fmt(c['dcp_all_tensors']['max_abs_diff'], 3)} "
                    f"| {c['metric_steps_differing'][:10]} |"
                )
        warnings = sorted(
            {
                w
                for run in [*unint.values(), stopped, resumed]
                for w in run.get("warnings", [])
                if "determinis" in w.lower()
            }
        )
        print(f"determinism warnings: {len(warnings)}")
        for line in warnings[:10]:
            print(f"  {line[:300]}")
    ckpt = report.get("ckpt", {})
    if ckpt:
        print(
            f"\n## checkpoint cost (median of {ckpt.get('repeats')} saves, sha256 "
            f"{_fmt(ckpt.get('sha256_GBps'), 2)} GB/s, disk free "
            f"{_fmt(ckpt.get('disk_free_GB'), 0)} GB)"
            f"{_error(ckpt)}"
        )
        print(
            "| model | params | ckpt GB | step s | sync stall s | sync GB/s | async stall s "
            "(first) | load s | load GB/s | peak GPU GB |\n" + "|---" * 10 + "|"
        )
        for r in ckpt.get("sizes", []):
            print(
                f"| {r['size']} | {r['params'] / 1e6:.1f} M | {r['GB']:.2f} "
                f"| {r['step_time']:.3f} | {r['sync_stall']:.2f} | {r['sync_save_GBps']:.2f} "
                f"| {_fmt(r['async_stall'], 2)} ({_fmt(r['async_first_stall'], 2)}) "
                f"| {r['load']:.2f} "
                f"| {r['load_GBps']:.2f} | {_fmt(r.get('peak_gpu_mem_GB'), 1)} |"
            )
        for r in ckpt.get("sizes", []):
            if "async_error" in r:
                print(f"{r['size']}: async save failed: {r['async_error'].splitlines()[-1]}")
        for s in ckpt.get("skipped", []):
            print(f"skipped {s['size']}: {s['why']}")
    notice = report.get("notice", {})
    if notice:
        print(f"\n## notice check{_error(notice)}")
        for key in (
            "pendingmax_cpu_gloo_us",
            "allreduce_cuda_nccl_item_us",
            "step_none_s",
            "step_pipelined_s",
            "pipelined_us_per_token",
        ):
            if key in notice:
                print(f"{key}: {_fmt(notice[key], 4)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke test)")
    parser.add_argument("--out", help="write the JSON report here too")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--workdir", help="scratch folder (default: a temporary one)")
    parser.add_argument(
        "--big-params",
        type=float,
        default=3e8,
        help="ckpt: sizes above this many parameters do at most 2 repeats",
    )
    parser.add_argument(
        "--ckpt-box",
        type=float,
        default=None,
        help="seconds after which ckpt starts no new size (default: 90%% of its timeout)",
    )
    for key, (full, _) in DEFAULTS.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(full), default=None)
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--part-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for key, (full, quick) in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    if args.ckpt_box is None:
        args.ckpt_box = 0.9 * args.timeout_ckpt
    return args


def main() -> int:
    args = parse_args()
    if args.part:
        return run_part_child(args)
    args.device = resolve_device(args.device)
    started = time.perf_counter()
    report: dict[str, Any] = {"meta": meta(args.device), "args": vars(args)}
    print(json.dumps(report["meta"]), flush=True)

    def save() -> None:
        report["wall_s"] = time.perf_counter() - started
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1, default=str))

    failed = False
    signal.signal(signal.SIGTERM, _on_sigterm)
    with tempfile.TemporaryDirectory(prefix="rljob-gpu-", dir=args.workdir) as root:
        for part in args.parts.split(","):
            try:
                report[part] = run_part(args, part, Path(root))
            except Exception:  # the report must be written whatever happens
                report[part] = {"error": traceback.format_exc()}
            failed |= "error" in report[part]
            save()
            if str(report[part].get("error", "")).startswith("terminated"):
                break
    print_summary(report)
    print("\n# JSON")
    print(json.dumps(report, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
