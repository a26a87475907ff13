"""The rljob checkpoint manifest: the file a checkpoint folder is complete with.

The trainer writes it last, after every rank has finished writing, through a
temporary file, fsync and rename, so a folder either has a manifest that names
every file with its size and checksum, or it is not a checkpoint yet. Readers
(the `rljob ckpt` tools, the operator's inspector) never need torch for this.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

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
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

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
