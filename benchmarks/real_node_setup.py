"""How long the test environment's real nodes take to set up: images, then nodes, then Ready.

Times each phase of `rljob testenv up --real-nodes N`, as the tests run it: the base,
pause, operator and trainer images (a cache hit when nothing they copy changed), the
control plane, and the nodes until Ready (their images imported into each containerd).
Run it twice for warm figures; `--cold` first drops the cached image archives (the
buildah layers stay, so torch is not downloaded again).

    .venv/bin/python benchmarks/real_node_setup.py --nodes 2 [--cold] [--without-trainer-image]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rljob_testenv import binaries, cluster, images

REPO = Path(__file__).resolve().parents[1]


def timed(what: str, work):
    started = time.monotonic()
    result = work()
    print(f"{what}: {time.monotonic() - started:.1f} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--without-trainer-image", action="store_true")
    args = parser.parse_args()
    quiet = lambda _msg: None  # noqa: E731
    if args.cold:
        for archive in images.images_dir().glob("*.tar"):
            archive.unlink()
    timed(
        "binaries (a cache hit unless missing)",
        lambda: binaries.install(say=quiet, real_nodes=True),
    )
    archives = [
        timed("pause image", lambda: images.pause_archive(quiet)),
        timed("operator image", lambda: images.build(images.OPERATOR, REPO, quiet)),
    ]
    if not args.without_trainer_image:
        archives.append(timed("trainer image", lambda: images.build(images.TRAINER, REPO, quiet)))
    name = f"bench-{int(time.time())}"
    real = cluster.RealNodes(args.nodes, 1, tuple(archives))
    try:
        timed(
            f"cluster with {args.nodes} real nodes, until Ready",
            lambda: cluster.up(name, gpu_nodes=0, say=quiet, real=real),
        )
    finally:
        timed("down", lambda: cluster.down(name, say=quiet))


if __name__ == "__main__":
    main()
