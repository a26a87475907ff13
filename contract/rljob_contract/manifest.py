"""The rljob checkpoint manifest: the file a checkpoint folder is complete with.

The trainer writes it last, after every rank has finished writing, through a
temporary file, fsync and rename, so a folder either has a manifest that names
every file with its size and checksum, or it is not a checkpoint yet. `check_complete`
is the one definition of a complete folder, which the trainer (before it resumes) and the
operator (before it resumes a gang) both apply. Neither needs torch for this.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from . import untrusted

MANIFEST_NAME = "rljob_manifest.json"
LAYOUT_NAME = "rljob"
LAYOUT_VERSION = 1
_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative to the checkpoint folder, '/'-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    step: int
    world_size: int
    files: tuple[ManifestEntry, ...]
    layout: str = LAYOUT_NAME
    layout_version: int = LAYOUT_VERSION
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    def to_json(self) -> str:
        data = asdict(self)
        data["files"] = [asdict(f) for f in self.files]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse a manifest; raise ValueError naming what is wrong with it."""
        try:
            data = untrusted.loads(text)
            files = tuple(
                ManifestEntry(path=str(f["path"]), size=int(f["size"]), sha256=str(f["sha256"]))
                for f in data["files"]
            )
            return cls(
                step=int(data["step"]),
                world_size=int(data["world_size"]),
                files=files,
                layout=str(data["layout"]),
                layout_version=int(data["layout_version"]),
                created_at=str(data.get("created_at", "")),
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{MANIFEST_NAME} is malformed: {exc}") from exc


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def describe_folder(folder: Path, step: int, world_size: int) -> Manifest:
    """Describe every regular file under `folder` (the manifest itself and temp files excluded)."""
    entries = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel == MANIFEST_NAME or rel.endswith(".tmp"):
            continue
        entries.append(ManifestEntry(rel, path.stat().st_size, sha256_of(path)))
    return Manifest(step=step, world_size=world_size, files=tuple(entries))


def write_atomically(path: Path, text: str) -> None:
    """Write through a temporary file, fsync it, rename it over `path`, fsync the folder."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_manifest(folder: Path, step: int, world_size: int) -> Manifest:
    """Seal a checkpoint folder: call once every rank has finished writing into it."""
    manifest = describe_folder(folder, step, world_size)
    write_atomically(folder / MANIFEST_NAME, manifest.to_json())
    return manifest


def read_manifest(folder: Path) -> Manifest:
    return Manifest.from_json((folder / MANIFEST_NAME).read_text())


class Incomplete(Exception):
    """A checkpoint folder not (yet) completely written: a save in flight, or cut off."""


class ManifestMissing(Incomplete):
    """No manifest at all, not even its temporary file."""


class Corrupt(Exception):
    """A finished save whose pieces are damaged: its files are not what it vouches for."""


SizeOf = Callable[[Path, str], int | None]


def regular_file_size(folder: Path, rel: str) -> int | None:
    """The size of the regular file `folder/rel`, None if there is none."""
    try:
        st = os.stat(folder / rel)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def safe_relative(rel: str) -> str:
    """`rel` if it stays inside the folder; a path that points elsewhere is corrupt."""
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or ".." in pure.parts or "\\" in rel:
        raise Corrupt(f"names a path outside the checkpoint folder: {rel!r}")
    return rel


def check_complete(
    folder: Path,
    step: int | None = None,
    *,
    deep: bool = False,
    size_of: SizeOf = regular_file_size,
) -> Manifest:
    """What "complete" means for rljob's own layout, for the trainer and the operator alike:
    the manifest is there (it is written last), parses, is of this layout and, where `step`
    is given, of that step; every file it lists has its size and, if `deep`, its sha256.

    Raises Incomplete or Corrupt with the reason; returns the manifest. `size_of` is how
    the caller reads sizes (the operator's refuses symlinks that lead out of the folder).
    """
    if not folder.is_dir():
        raise Incomplete(f"{folder} does not exist or is not a folder")
    if size_of(folder, MANIFEST_NAME) is None:
        if size_of(folder, MANIFEST_NAME + ".tmp") is not None:
            raise Incomplete(f"{MANIFEST_NAME} is still being written (only its .tmp exists)")
        raise ManifestMissing(f"no {MANIFEST_NAME}: the trainer writes it last")
    try:
        manifest = read_manifest(folder)
    except (OSError, ValueError) as exc:
        raise Corrupt(str(exc)) from exc
    if manifest.layout != LAYOUT_NAME:
        raise Corrupt(f"{MANIFEST_NAME} is for layout {manifest.layout!r}, not {LAYOUT_NAME!r}")
    if manifest.layout_version > LAYOUT_VERSION:
        raise Corrupt(
            f"{MANIFEST_NAME} has layout_version {manifest.layout_version};"
            f" this tool reads up to {LAYOUT_VERSION}"
        )
    if step is not None and manifest.step != step:
        raise Corrupt(f"{MANIFEST_NAME} is for step {manifest.step}, the folder for step {step}")
    if not manifest.files:
        raise Corrupt(f"{MANIFEST_NAME} lists no files")
    for entry in manifest.files:
        rel = safe_relative(entry.path)
        size = size_of(folder, rel)
        if size is None:
            raise Corrupt(f"{rel} is listed in {MANIFEST_NAME} but missing")
        if size != entry.size:
            raise Corrupt(f"{rel} is {size} bytes, {MANIFEST_NAME} says {entry.size}")
    if deep:
        for entry in manifest.files:
            if sha256_of(folder / entry.path) != entry.sha256:
                raise Corrupt(f"{entry.path} does not match its sha256 in {MANIFEST_NAME}")
    return manifest
