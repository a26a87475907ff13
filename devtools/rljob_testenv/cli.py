"""`rljob testenv ...`: install the binaries, start, inspect and stop local clusters."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from rljob_operator.cli import CommandError

from . import binaries, cluster, images, kind, pki

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "testenv", help="a local Kubernetes control plane (kwok) for tests and the demo"
    )
    commands = parser.add_subparsers(dest="testenv_command", required=True)

    install = commands.add_parser("install", help="build or find the pinned Kubernetes binaries")
    install.add_argument(
        "--node-binaries",
        action="store_true",
        help="also what kind's node image holds (kubelet, kubeadm, containerd, crictl, ...)",
    )
    install.add_argument(
        "--peers",
        action="store_true",
        help="also the operators benchmarks/peers.py compares with (JobSet, training-operator)",
    )
    install.add_argument(
        "--kueue", action="store_true", help="also Kueue, for the tests of queued jobs"
    )
    install.set_defaults(handler=_reported(_install))
    commands.add_parser(
        "images",
        help="build the images kind's nodes run in the tests where they changed; print their "
        "archives",
    ).set_defaults(handler=_reported(_images))

    def named(cmd: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(cmd, help=help_text)
        sub.add_argument("--name", default=cluster.DEFAULT_CLUSTER_NAME, help="cluster name")
        return sub

    up = named("up", "start a cluster with kwok GPU nodes (installs binaries if needed)")
    up.add_argument("--nodes", type=int, default=3, help="number of kwok GPU nodes")
    up.add_argument("--gpus-per-node", type=int, default=8)
    up.set_defaults(handler=_reported(_up))
    named("down", "stop a cluster and remove its files").set_defaults(handler=_reported(_down))
    named("kubeconfig", "print the path of a cluster's kubeconfig").set_defaults(
        handler=_reported(_kubeconfig)
    )
    commands.add_parser("list", help="list local clusters").set_defaults(handler=_reported(_list))
    _register_kind(commands)


def _register_kind(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "kind", help="a multi-node kind cluster on rootful podman, offline (docs/kind.md)"
    )
    sub = parser.add_subparsers(dest="kind_command", required=True)
    sub.add_parser(
        "image", help="build the kind node image from the pinned binaries if its inputs changed"
    ).set_defaults(handler=_reported(_kind_image))

    def named(cmd: str, help_text: str) -> argparse.ArgumentParser:
        one = sub.add_parser(cmd, help=help_text)
        one.add_argument("--name", default=KIND_CLUSTER_NAME, help="kind cluster name")
        return one

    up = named("up", "create a kind cluster (a control plane and workers); print its kubeconfig")
    up.add_argument("--workers", type=int, default=2)
    up.add_argument(
        "--shared-dir",
        type=Path,
        help=f"host folder every node mounts at {kind.SHARED_MOUNT} "
        "(default: the cluster's folder in the cache, removed by `down`)",
    )
    up.add_argument(
        "--install", action="store_true", help="install podman with apt-get where it is missing"
    )
    up.set_defaults(handler=_reported(_kind_up))
    load = named("load", "import image archives (docker or OCI) into every node")
    load.add_argument("archives", nargs="+", type=Path)
    load.set_defaults(handler=_reported(_kind_load))
    named("down", "delete a kind cluster").set_defaults(handler=_reported(_kind_down))
    named("kubeconfig", "print the path of a kind cluster's kubeconfig").set_defaults(
        handler=_reported(_kind_kubeconfig)
    )


KIND_CLUSTER_NAME = "rljob-kind"


def _kind_image(args: argparse.Namespace) -> int:
    kind.ensure_kind(_say)  # kind too, so that a cluster can be made without building
    print(kind.ensure_node_image(_say))
    return 0


def _kind_up(args: argparse.Namespace) -> int:
    shared = args.shared_dir or kind.cluster_dir(args.name) / "shared"
    print(kind.create_cluster(args.name, args.workers, shared, say=_say, install=args.install))
    return 0


def _kind_load(args: argparse.Namespace) -> int:
    for archive in args.archives:
        kind.load_image_archive(args.name, archive)
    return 0


def _kind_down(args: argparse.Namespace) -> int:
    kind.delete_cluster(args.name, say=_say)
    return 0


def _kind_kubeconfig(args: argparse.Namespace) -> int:
    if not kind.cluster_exists(args.name):
        _say(f"kind cluster {args.name!r} does not exist: create it with `rljob testenv kind up`")
        return 1
    print(kind.kubeconfig_path(args.name))
    return 0


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _install(args: argparse.Namespace) -> int:
    for name, path in binaries.install(
        say=_say, node_binaries=args.node_binaries, peers=args.peers, kueue=args.kueue
    ).items():
        print(f"{name}\t{path}")
    return 0


def _images(args: argparse.Namespace) -> int:
    """The images tests/e2e/kind runs, built from the repository's Dockerfiles where what
    they copy changed."""
    repo = Path(__file__).resolve().parents[2]
    for image in (images.OPERATOR, images.TRAINER, images.ray_driver_image()):
        print(images.build(image, repo, _say))
    return 0


def _up(args: argparse.Namespace) -> int:
    binaries.install(say=_say)
    shape = cluster.NodeShape(gpus=args.gpus_per_node)
    print(cluster.up(args.name, gpu_nodes=args.nodes, shape=shape, say=_say))
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster.down(args.name, say=_say)
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    cluster.validate_name(args.name)
    if not cluster.exists(args.name):
        _say(f"cluster {args.name!r} is not running: start it with `rljob testenv up`")
        return 1
    print(cluster.kubeconfig_path(args.name))
    return 0


def _list(args: argparse.Namespace) -> int:
    for name in cluster.list_clusters():
        print(name)
    return 0


ERRORS = (
    binaries.BinariesError,
    cluster.ClusterError,
    images.ImageError,
    kind.KindError,
    pki.PkiError,
)


def _reported(handler: Handler) -> Handler:
    """The test environment's own errors end the command as `rljob: error: <message>`."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except ERRORS as exc:
            raise CommandError(str(exc)) from exc

    return run
