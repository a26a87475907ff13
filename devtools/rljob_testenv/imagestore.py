"""The nodes' images in one containerd store, made once per set of image archives.

Loading the images into each kind node's containerd (`kind load image-archive`) took 97-194 s
a run on the development machine: each containerd copies the 2.9 GB trainer image into its
content store and unpacks it. Here a containerd of its own imports them once into a store
kept in the cache, and each node's containerd starts on hard links of that store.
containerd never writes a content blob or an image layer's unpacked files in place (a
container writes into a layer of its own, over them), so the nodes can share those files;
everything else in the store (its bolt databases, ...) is small and each node gets its own
copy. kind's nodes start so (kind.node_stores), on a store that begins as the node image's
own.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import tomli_w

from . import binaries

# Where containerd keeps what it never changes once written: blobs, and unpacked layers.
SHARED_DIRS = (
    Path("io.containerd.content.v1.content", "blobs"),
    Path("io.containerd.snapshotter.v1.overlayfs", "snapshots"),
)
# Each containerd's own id, made at its first start: never shared.
OWN_ID = "io.containerd.grpc.v1.introspection"
NAMESPACE = "k8s.io"  # the kubelet's (CRI's) namespace
LOCK = "lock"


class ImageStoreError(RuntimeError):
    """The store could not be made; the message has containerd's own words."""


def stores_dir(family: str = "") -> Path:
    """Where one family's stores are kept (kind's nodes': "kind"); making one removes the
    family's others."""
    return binaries.cache_root() / ("containerd-stores" + (f"-{family}" if family else ""))


def store_for(
    archives: list[Path],
    say: Callable[[str], None] = print,
    base: Path | None = None,
    family: str = "",
) -> Path:
    """The root of a containerd store that holds `archives` (made now if the cache lacks it),
    besides what the containerd root `base` holds (a kind node image's own images).

    The archives' names carry a hash of their content (images.build), so they, the base's
    path and the containerd binary name the store; the family's stores of other archives
    are removed.
    """
    containerd = binaries.require("containerd")
    named = [str(containerd), str(base or ""), *(a.name for a in archives)]
    key = hashlib.sha256("\n".join(named).encode()).hexdigest()[:16]
    folder = stores_dir(family)
    store = folder / key
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / LOCK).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another start of the nodes may be making it
        if not (store / "root").is_dir():
            _make(containerd, store, archives, base, say)
    return store / "root"


def _make(
    containerd: Path,
    store: Path,
    archives: list[Path],
    base: Path | None,
    say: Callable[[str], None],
) -> None:
    for stale in store.parent.iterdir():
        if stale.name != LOCK:
            shutil.rmtree(stale, ignore_errors=True)
    started = time.monotonic()
    say(f"  importing {', '.join(a.name for a in archives)} into the nodes' image store")
    partial = store.with_name(f"{store.name}.partial")
    # The daemon's sockets in a short folder: a unix socket's path has at most 108 bytes.
    sockets = Path(tempfile.mkdtemp(prefix="rjstore-", dir="/tmp"))
    try:
        partial.mkdir()
        if base is not None:
            subprocess.run(["cp", "-a", str(base), str(partial / "root")], check=True)
        _import(containerd, partial, sockets, archives)
        store.mkdir()
        (partial / "root").rename(store / "root")
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)
    say(f"  image store made in {time.monotonic() - started:.0f}s")


def _import(containerd: Path, work: Path, sockets: Path, archives: list[Path]) -> None:
    with private_containerd(containerd, work / "root", work, sockets) as socket:
        for archive in archives:
            done = subprocess.run([*ctr(socket), "images", "import", str(archive)],
                                  capture_output=True, text=True, check=False)  # fmt: skip
            if done.returncode != 0:
                raise ImageStoreError(f"ctr could not import {archive.name}: {done.stderr}")


@contextmanager
def private_containerd(containerd: Path, root: Path, work: Path, sockets: Path) -> Iterator[Path]:
    """A containerd of our own on `root`, with only what an image import needs, while the block
    runs: its socket (in `sockets`, a short folder: a unix socket's path has at most 108 bytes).
    Its config and log are in `work`."""
    socket = sockets / "containerd.sock"
    config = {
        "version": 3,
        "root": str(root),
        "state": str(sockets / "state"),
        "grpc": {"address": str(socket)},
        "ttrpc": {"address": f"{socket}.ttrpc"},
        "debug": {"address": ""},
        "metrics": {"address": ""},
        # No CRI and no NRI: they would open fixed sockets and listen beside the nodes'.
        "disabled_plugins": [
            "io.containerd.nri.v1.nri",
            "io.containerd.grpc.v1.cri",
            "io.containerd.cri.v1.runtime",
            "io.containerd.cri.v1.images",
        ],
    }
    (work / "config.toml").write_text(tomli_w.dumps(config))
    log = (work / "containerd.log").open("wb")
    daemon = subprocess.Popen(
        [str(containerd), "--config", str(work / "config.toml")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise ImageStoreError(f"containerd did not start:\n{_tail(work)}")
            time.sleep(0.1)
        yield socket
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(10)
        log.close()


def ctr(socket: Path) -> list[str]:
    """The ctr command line for the containerd at `socket`, in the namespace the kubelet uses."""
    return [str(binaries.require("ctr")), "--address", str(socket), "-n", NAMESPACE]


def _tail(work: Path) -> str:
    return "\n".join((work / "containerd.log").read_text(errors="replace").splitlines()[-20:])


def link_into(store: Path, root: Path) -> None:
    """Give a node's containerd `root` the store's images before it starts: hard links of
    what containerd never changes, a copy of the rest."""
    shared = [store / sub for sub in SHARED_DIRS]
    for sub in SHARED_DIRS:
        (root / sub).parent.mkdir(parents=True, exist_ok=True)
        # cp keeps what an image's files need: owners, modes, xattrs (overlay's opaque
        # directories), device nodes (its whiteouts) and symlinks as they are.
        subprocess.run(["cp", "-a", "--link", str(store / sub), str(root / sub)], check=True)
    shutil.copytree(
        store, root, symlinks=True, dirs_exist_ok=True,
        ignore=lambda folder, names: [
            name for name in names
            if Path(folder, name) in shared or (Path(folder) == store and name == OWN_ID)
        ],
    )  # fmt: skip
