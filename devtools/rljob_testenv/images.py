"""The project's images, built from its own Dockerfiles with buildah, for kind's nodes.

No container registry is reachable here, so nothing is pulled: the base image is a
Debian bookworm made locally with mmdebstrap (python3 with a venv at /usr/local, so
that `python` and `pip` are on PATH as in the official python images), the pause image
is Debian's static catatonit, and each Dockerfile builds with `--pull=never` on that
base through its BASE_IMAGE argument. Every image is saved as an OCI archive under
the cache, keyed by a hash of what went into it, and unpacked into the store kind's nodes
start on (kind.node_stores).

buildah runs its RUN steps with runc (crun refuses this machine's hybrid cgroups) and
with the host's CA bundle mounted, which is how they reach PyPI.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from . import binaries

BASE_IMAGE = "localhost/rljob-base/python:3.11-bookworm"
# The sandbox image of kind's nodes, under this name too: a pod of it runs until deleted.
PAUSE_IMAGE = "localhost/rljob-testenv/pause:catatonit"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
HOST_PROGRAMS = {"buildah": "buildah", "mmdebstrap": "mmdebstrap"}


class ImageError(RuntimeError):
    """An image could not be built; the message carries the builder's output."""


@dataclass(frozen=True)
class ImageBuild:
    """One of the repository's Dockerfiles, built for the test nodes."""

    tag: str
    dockerfile: str  # relative to the repository root
    copies: tuple[str, ...]  # the files and folders the Dockerfile copies: they make the key
    build_args: dict[str, str] = field(default_factory=dict)
    context: str = "."  # the build context, relative to the repository root
    base: ImageBuild | None = None  # the repository's image this one is built FROM

    def key(self, repo: Path) -> str:
        digest = hashlib.sha256()
        digest.update(repr((self.tag, self.dockerfile, sorted(self.build_args.items()))).encode())
        if self.context != ".":
            digest.update(self.context.encode())
        for path in _context_files(repo, (self.dockerfile, *self.copies)):
            digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes())
        if self.base:
            digest.update(self.base.key(repo).encode())
        return digest.hexdigest()[:16]


OPERATOR = ImageBuild(
    "localhost/rljob-operator:dev",
    "Dockerfile",
    ("pyproject.toml", "README.md", "requirements", "contract", "operator"),
    {"BASE_IMAGE": BASE_IMAGE},
)
# The trainer's CPU variant: torch from PyPI (a CUDA build, which runs on the CPU with gloo).
TORCH_REQUIREMENT = "torch==2.15.0"
TRAINER = ImageBuild(
    "localhost/rljob-trainer:cpu",
    "trainer_image/Dockerfile",
    ("contract", "trainer_image"),
    {"BASE_IMAGE": BASE_IMAGE, "TORCH_REQUIREMENT": TORCH_REQUIREMENT},
)

# Test tooling, never shipped: the trainer image plus Ray, verl and the e2e tests' Ray driver
# (tests/e2e/ray_trainer.py), for a verl-shaped Ray job on kind. Its context is tests/e2e,
# which the repository's .dockerignore keeps out of the product images.
RAY_DRIVER_PACKAGES = (
    "ray", "verl", "TransferQueue", "transformers", "tensordict", "omegaconf", "numpy",
    "cachetools", "fastapi", "uvicorn",
)  # fmt: skip


def pinned_as_here(packages: Iterable[str]) -> str:
    """`name==version` of each package as this environment has it: the image's driver then
    runs the same libraries as the uninterrupted reference run made here."""
    return " ".join(f"{name}=={metadata.version(name)}" for name in packages)


def ray_driver_image() -> ImageBuild:
    return ImageBuild(
        "localhost/rljob-e2e-ray-driver:cpu",
        "tests/e2e/kind/ray-driver.Dockerfile",
        ("tests/e2e/ray_trainer.py",),
        {"TRAINER_IMAGE": TRAINER.tag, "PACKAGES": pinned_as_here(RAY_DRIVER_PACKAGES)},
        context="tests/e2e",
        base=TRAINER,
    )


def _build_output(path: Path) -> bool:
    """What an install leaves in the sources (.dockerignore keeps it out of the context)."""
    return "__pycache__" in path.parts or any(part.endswith(".egg-info") for part in path.parts)


def _context_files(repo: Path, roots: Iterable[str]) -> list[Path]:
    files = []
    for root in roots:
        path = repo / root
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [p for p in candidates if p.is_file() and not _build_output(p)]
    return files


def images_dir() -> Path:
    return binaries.cache_root() / "images"


def check_host() -> None:
    missing = sorted({pkg for prog, pkg in HOST_PROGRAMS.items() if not shutil.which(prog)})
    if missing:
        raise ImageError(
            "building the images needs these Debian packages: "
            + " ".join(missing)
            + " (run `make host-deps`)"
        )


def _run(cmd: list[str], what: str, timeout: float = 3600) -> str:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"{what} did not finish in {timeout:.0f}s") from exc
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
        raise ImageError(f"{what} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def _has_image(ref: str) -> bool:
    result = subprocess.run(
        ["buildah", "inspect", "--type", "image", ref], capture_output=True, check=False
    )
    return result.returncode == 0


def _save(ref: str, archive: Path) -> Path:
    """An OCI archive with zstd layers: half the size of plain ones, in each node's store too."""
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    _run(
        ["buildah", "push", "--quiet", "--compression-format", "zstd", ref,
         f"oci-archive:{partial}:{ref}"],
        f"saving {ref}",
    )  # fmt: skip
    partial.rename(archive)
    return archive


def base_image(say: Callable[[str], None] = print) -> str:
    """The local python base in buildah's store, made with mmdebstrap if it is not there."""
    if _has_image(BASE_IMAGE):
        return BASE_IMAGE
    images_dir().mkdir(parents=True, exist_ok=True)
    rootfs = images_dir() / "base-rootfs.tar"
    started = time.monotonic()
    say(f"  making the base image {BASE_IMAGE} with mmdebstrap (Debian bookworm)")
    _run(
        [
            "mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
            "--customize-hook=chroot \"$1\" python3 -m venv /usr/local",
            "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin",
            "bookworm", str(rootfs),
        ],
        "mmdebstrap",
    )  # fmt: skip
    container = _run(["buildah", "from", "scratch"], "buildah from scratch").strip()
    try:
        _run(["buildah", "add", "--quiet", container, str(rootfs), "/"], "adding the root fs")
        _run(
            [
                "buildah", "config",
                "--env", "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env", "LANG=C.UTF-8", "--cmd", "python3", container,
            ],
            "configuring the base image",
        )  # fmt: skip
        _run(["buildah", "commit", "--quiet", container, BASE_IMAGE], "committing the base image")
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
        rootfs.unlink(missing_ok=True)
    say(f"  base image made in {time.monotonic() - started:.0f}s")
    return BASE_IMAGE


def _in_buildah(ref: str, archive: Path) -> None:
    """`ref` in buildah's store, from its archive where the store lost it (a base image)."""
    if not _has_image(ref):
        pull = ["buildah", "pull", "--quiet", f"oci-archive:{archive}"]
        pulled = _run(pull, f"reading {archive.name}")
        _run(["buildah", "tag", pulled.split()[-1], ref], f"tagging {ref}")


def pause_archive(say: Callable[[str], None] = print) -> Path:
    """The sandbox ("pause") image: Debian's static catatonit in pause mode, and nothing else."""
    archive = images_dir() / "pause-catatonit.tar"
    if archive.exists():
        return archive
    check_host()
    images_dir().mkdir(parents=True, exist_ok=True)
    say(f"  making the pause image {PAUSE_IMAGE} from catatonit")
    container = _run(["buildah", "from", "scratch"], "buildah from scratch").strip()
    try:
        catatonit = shutil.which("catatonit") or "/usr/bin/catatonit"
        _run(["buildah", "copy", "--quiet", container, catatonit, "/pause"], "copying catatonit")
        _run(
            ["buildah", "config", "--entrypoint", '["/pause", "-P"]', container],
            "configuring the pause image",
        )
        _run(
            ["buildah", "commit", "--quiet", container, PAUSE_IMAGE],
            "committing the pause image",
        )
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return _save(PAUSE_IMAGE, archive)


def build(image: ImageBuild, repo: Path, say: Callable[[str], None] = print) -> Path:
    """Build one Dockerfile of the repository (if its inputs changed) and return its archive."""
    slug = image.tag.rsplit("/", 1)[-1].replace(":", "-")
    archive = images_dir() / f"{slug}-{image.key(repo)}.tar"
    if archive.exists():
        return archive
    check_host()
    if image.base:
        _in_buildah(image.base.tag, build(image.base, repo, say))
    else:
        base_image(say)
    started = time.monotonic()
    say(f"  building {image.tag} from {image.dockerfile}")
    cmd = ["buildah", "build", "--pull=never", "--runtime", "runc", "--layers", "--quiet"]
    cmd += ["--volume", "/etc/ssl/certs:/etc/ssl/certs:ro"]
    for key, value in sorted(image.build_args.items()):
        cmd += ["--build-arg", f"{key}={value}"]
    cmd += ["--file", str(repo / image.dockerfile), "--tag", image.tag, str(repo / image.context)]
    _run(cmd, f"building {image.dockerfile}")
    subprocess.run(["buildah", "rmi", "--prune"], capture_output=True, check=False)
    for stale in images_dir().glob(f"{slug}-*.tar"):
        stale.unlink()
    _save(image.tag, archive)
    say(f"  {image.tag} built in {time.monotonic() - started:.0f}s")
    return archive
