"""rljob's own layout: a folder is complete exactly when its manifest says so.

The trainer writes `actor/` (DCP), `actor/model/` (safetensors), `data/data.pt`, and
then, last and atomically, `rljob_manifest.json` naming every file with its size and
sha256. Quick: the manifest parses, is for this step, and every file it lists has its
size. Deep: every checksum matches too (which also covers truncated archives).
"""

from __future__ import annotations

from pathlib import Path

from rljob_contract.manifest import (
    LAYOUT_NAME,
    LAYOUT_VERSION,
    MANIFEST_NAME,
    read_manifest,
    sha256_of,
)

from ..probe import safe_relative, size_of
from ..verdict import Corrupt, Incomplete
from .base import Layout


def check(folder: Path, step: int, deep: bool) -> str:
    if size_of(folder, MANIFEST_NAME) is None:
        if size_of(folder, MANIFEST_NAME + ".tmp") is not None:
            raise Incomplete(f"{MANIFEST_NAME} is still being written (only its .tmp exists)")
        raise Incomplete(
            f"no {MANIFEST_NAME}: the trainer writes it last"
            " (an RLinf FSDP folder looks the same: use --layout rlinf-fsdp)"
        )
    try:
        manifest = read_manifest(folder)
    except ValueError as exc:
        raise Corrupt(str(exc)) from exc
    if manifest.layout != LAYOUT_NAME:
        raise Corrupt(f"{MANIFEST_NAME} is for layout {manifest.layout!r}, not {LAYOUT_NAME!r}")
    if manifest.layout_version > LAYOUT_VERSION:
        raise Corrupt(
            f"{MANIFEST_NAME} has layout_version {manifest.layout_version};"
            f" this tool reads up to {LAYOUT_VERSION}"
        )
    if manifest.step != step:
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
    checked = "sizes and checksums" if deep else "sizes"
    return f"{MANIFEST_NAME}: {len(manifest.files)} files, {checked} match"


LAYOUT = Layout("rljob", check)
