"""How long `rljob ckpt latest` takes, and what deep verification costs per GB.

1. Builds N (default 10,000) `global_step_N` folders of the rljob layout with small files
   in a temporary directory, tears the newest K (no manifest, as a preempted save leaves
   them), and times `find_latest` in quick mode over several repetitions.
2. Builds one rljob checkpoint of --deep-mb megabytes and times deep verification
   (sha256 of every file against the manifest), as seconds per GB and GB per second.

Files are freshly written, so they are read from the page cache: the figures are the
tool's own cost, not the storage's. Run: .venv/bin/python benchmarks/ckpt_latest.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rljob_contract.manifest import MANIFEST_NAME, describe_folder
from rljob_operator.checkpoints import find_latest, verify_folder


def build_rljob(root: Path, step: int, sizes: dict[str, int], seal: bool = True) -> Path:
    """An rljob checkpoint folder with files of the given sizes, sealed by its manifest."""
    folder = root / f"global_step_{step}"
    for rel, size in sizes.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            remaining = size
            while remaining:
                chunk = os.urandom(min(remaining, 1 << 20))
                fh.write(chunk)
                remaining -= len(chunk)
    if seal:  # what write_manifest writes, without its fsyncs (10,000 of them cost minutes)
        (folder / MANIFEST_NAME).write_text(describe_folder(folder, step, 1).to_json())
    return folder


SMALL = {"actor/__0_0.distcp": 512, "actor/.metadata": 128, "data/data.pt": 256}


def timed(function: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def bench_latest(root: Path, folders: int, torn: int, repeat: int) -> None:
    start = time.perf_counter()
    for step in range(1, folders + 1):
        build_rljob(root, step, SMALL, seal=step <= folders - torn)
    print(f"built {folders} folders ({torn} newest torn) in {time.perf_counter() - start:.1f} s")
    for layout in ("rljob", "auto"):
        result = find_latest(root, layout, "quick")
        assert result.step == folders - torn, result
        times = timed(lambda layout=layout: find_latest(root, layout, "quick"), repeat)
        print(
            f"latest --layout {layout} --verify quick over {folders} folders:"
            f" median {statistics.median(times) * 1e3:.1f} ms,"
            f" p95 {p95(times) * 1e3:.1f} ms (n={repeat})"
        )


def bench_deep(root: Path, megabytes: int, repeat: int) -> None:
    parts = 4
    size = megabytes * 1024 * 1024 // parts
    sizes = {f"actor/__{r}_0.distcp": size for r in range(parts - 1)}
    sizes["actor/model/model.safetensors"] = size
    folder = build_rljob(root, 1, sizes)
    assert verify_folder(folder, "rljob", "deep").verdict.ok
    times = timed(lambda: verify_folder(folder, "rljob", "deep"), repeat)
    gigabytes = size * parts / 1e9
    median = statistics.median(times)
    print(
        f"verify --verify deep of a {gigabytes:.2f} GB rljob checkpoint:"
        f" median {median:.2f} s = {median / gigabytes:.2f} s/GB,"
        f" {gigabytes / median:.2f} GB/s (n={repeat})"
    )
    quick = timed(lambda: verify_folder(folder, "rljob", "quick"), repeat)
    print(f"verify --verify quick of the same: median {statistics.median(quick) * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folders", type=int, default=10_000)
    parser.add_argument("--torn", type=int, default=5, help="newest folders left unsealed")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--deep-mb", type=int, default=256, help="size of the deep checkpoint")
    parser.add_argument("--deep-repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, {sys.executable}")
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        bench_latest(Path(tmp) / "latest", args.folders, args.torn, args.repeat)
        bench_deep(Path(tmp) / "deep", args.deep_mb, args.deep_repeat)


if __name__ == "__main__":
    main()
