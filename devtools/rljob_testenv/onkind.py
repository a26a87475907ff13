"""rljob on a kind cluster, as a user runs it: the project's images on the nodes (a new
cluster's nodes start with the big ones, kind.node_stores, and get the operator's with `kind
load image-archive`; a reused one gets what it lacks so), a host folder every node mounts for
the checkpoints (a ReadWriteMany volume, as NFS or Lustre would be), and the operator installed
by its chart.

The kind e2e tests (tests/e2e/kind) and hack/kind-e2e.sh both stand the cluster up here.
Everything is checked before the cluster is made (podman, cgroups, disk for the images), so
that a machine that cannot run it fails at once, saying what it lacks.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import images, kind

Say = Callable[[str], None]

# containerd keeps an image's compressed layers and unpacks them beside: the trainer's 2.9 GB
# archive took about 8 GB (docs/kind.md).
UNPACKED_PER_ARCHIVE_BYTE = 3
IMPORT_TIMEOUT = 900


def archive_image(archive: Path) -> tuple[str, str]:
    """The name and manifest digest of the image an OCI archive holds (containerd lists it by
    both once it is imported)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise kind.KindError(f"{archive} is not an OCI archive (no index.json)")
        manifest = json.load(member)["manifests"][0]
    return manifest["annotations"]["org.opencontainers.image.ref.name"], manifest["digest"]


def nodes_lacking(ref: str, digest: str, nodes: list[str]) -> list[str]:
    """The nodes whose containerd does not hold `ref` at `digest` (a reused cluster keeps what
    an earlier run loaded; a rebuilt image has another digest)."""
    lacking = []
    for node in nodes:
        listed = kind.node_exec(node, "ctr", "-n", "k8s.io", "images", "ls", f"name=={ref}")
        if digest not in listed:
            lacking.append(node)
    return lacking


def archive_blobs(archive: Path) -> dict[str, int]:
    """The size of each blob (layer, config, manifest) an OCI archive holds, by name."""
    with tarfile.open(archive) as tar:
        return {m.name: m.size for m in tar if m.name.startswith("blobs/")}


def check_room(archives: list[Path], say: Say = print) -> None:
    """KindError unless the disk under the provider's store has room for the images once (the
    nodes share one store by hard links, kind.node_stores; images built on another share its
    layers there), besides a cluster's own."""
    blobs = {name: size for archive in archives for name, size in archive_blobs(archive).items()}
    needed = sum(blobs.values()) * UNPACKED_PER_ARCHIVE_BYTE
    store = kind.provider_store()
    probe = store if store.exists() else Path("/")
    free = shutil.disk_usage(probe).free
    wanted = needed + kind.CLUSTER_DISK_GIB * 2**30
    say(f"  disk: the images need about {needed / 2**30:.1f} GiB unpacked, "
        f"{free / 2**30:.1f} GiB are free under {store}")  # fmt: skip
    if free < wanted:
        raise kind.KindError(
            f"a kind cluster with these images needs about {wanted / 2**30:.0f} GiB free under "
            f"{store}; {free / 2**30:.1f} GiB are"
        )


def load_images(name: str, loads: dict[Path, list[str]], say: Say = print) -> None:
    """Each archive into its nodes, all at once (kind imports into its nodes in parallel too),
    skipping nodes that already hold the same image."""
    errors: list[BaseException] = []

    def load(archive: Path, nodes: list[str]) -> None:
        try:
            lacking = nodes_lacking(*archive_image(archive), nodes)
            if not lacking:
                say(f"  {archive.name}: already on {', '.join(nodes)}")
                return
            started = time.monotonic()
            kind.load_image_archive(name, archive, lacking, timeout=IMPORT_TIMEOUT)
            say(f"  {archive.name} loaded into {', '.join(lacking)} "
                f"in {time.monotonic() - started:.0f}s")  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=load, args=item) for item in loads.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def up(
    name: str,
    shared_dir: Path,
    repo: Path,
    workers: int = 2,
    say: Say = print,
    more_images: tuple[images.ImageBuild, ...] = (),
) -> Path:
    """A kind cluster of a control plane and `workers` workers sharing `shared_dir`, with the
    operator and trainer images (and `more_images`) on every node; its kubeconfig. A cluster
    made here starts with the trainer's and `more_images` (kind.node_stores) and gets the
    operator's with `kind load image-archive`; an existing cluster of that name is reused and
    gets the images it lacks so. One this call made is deleted again if it fails."""
    kind.check_host(say=say)
    operator = images.build(images.OPERATOR, repo, say)
    stored = [images.build(image, repo, say) for image in (images.TRAINER, *more_images)]
    control_plane, worker_nodes = kind.node_names(name, workers)
    every_node = [control_plane, *worker_nodes]
    made = not kind.cluster_exists(name)
    try:
        if made:
            check_room([operator, *stored], say)
            # The operator's image changes with every change to the operator, and is small:
            # loaded, it leaves the store (made again only when the big images change) alone.
            kubeconfig = kind.create_cluster(name, workers, shared_dir, say=say, images=stored)
            load_images(name, {operator: every_node}, say)
        else:
            kubeconfig = kind.create_cluster(name, workers, shared_dir, say=say)
            load_images(name, {a: every_node for a in (operator, *stored)}, say)
    except BaseException:
        if made:  # leave nothing behind that this call made
            kind.delete_cluster(name, say=say)
        raise
    return kubeconfig
