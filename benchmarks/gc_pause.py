"""How long one full collection of Python's garbage collector holds the operator's process
(every thread waits for the GIL), with the operator's cache full, before and after the
controller's relist freezes what it holds (controller.Controller.relist, gc.freeze).

    .venv/bin/python benchmarks/gc_pause.py [--jobs 1000] [--nodes 250] [--repeat 7]

No cluster: a ClusterCache is filled, as a relist fills it, with `--jobs` 2-pod jobs made by
the unit tests' builders (pods of about the size the API server sends), their nodes, and the
modules the operator imports (kopf, the kubernetes client). Prints the median and the largest
of `--repeat` full collections, unfrozen and frozen.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import kopf  # noqa: E402, F401  (the operator's process holds it)
from builders import make_job, make_node, make_pod  # noqa: E402
from rljob_operator import handlers  # noqa: E402, F401
from rljob_operator.runtime.cache import ClusterCache  # noqa: E402


def filled_cache(jobs: int, nodes: int) -> ClusterCache:
    cache = ClusterCache()
    revision = 1
    for n in range(nodes):
        node = make_node(f"gpu-node-{n}")
        node["metadata"]["resourceVersion"] = str(revision := revision + 1)
        cache.on_node(None, node)
    for j in range(jobs):
        job = make_job(f"job-{j}")
        job["metadata"]["resourceVersion"] = str(revision := revision + 1)
        cache.on_job(None, job)
        for rank in range(2):
            pod = make_pod(job, 0, rank, node=f"gpu-node-{(2 * j + rank) % nodes}")
            pod["metadata"]["resourceVersion"] = str(revision := revision + 1)
            cache.on_pod(None, pod)
    return cache


def full_collections(repeat: int) -> list[float]:
    spans = []
    for _ in range(repeat):
        started = time.perf_counter()
        gc.collect(2)
        spans.append((time.perf_counter() - started) * 1000)
    return spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    cache = filled_cache(args.jobs, args.nodes)
    tracked = len(gc.get_objects())
    unfrozen = full_collections(args.repeat)
    gc.freeze()
    frozen = full_collections(args.repeat)
    print(f"{args.jobs} jobs of 2 pods on {args.nodes} nodes in the cache; "
          f"{tracked:,} objects tracked by the collector")  # fmt: skip
    for name, spans in (("unfrozen", unfrozen), ("frozen", frozen)):
        print(f"  full collection, {name:8}: median {statistics.median(spans):6.1f} ms, "
              f"max {max(spans):6.1f} ms")  # fmt: skip
    del cache


if __name__ == "__main__":
    main()
