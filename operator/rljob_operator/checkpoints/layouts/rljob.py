"""rljob's own layout: a folder is complete exactly when its manifest says so.

The trainer writes `actor/` (DCP), `actor/model/` (safetensors), `data/data.pt`, and
then, last and atomically, `rljob_manifest.json` naming every file with its size and
sha256. Quick: the manifest parses, is for this step, and every file it lists has its
size. Deep: every checksum matches too (which also covers truncated archives).
"""

from __future__ import annotations

from pathlib import Path

from rljob_contract.manifest import MANIFEST_NAME, ManifestMissing, check_complete

from ..probe import size_of
from .base import Layout


def check(folder: Path, step: int, deep: bool) -> str:
    """The contract's definition of complete, with the operator's confined file access."""
    try:
        manifest = check_complete(folder, step, deep=deep, size_of=size_of)
    except ManifestMissing as exc:
        raise ManifestMissing(
            f"{exc} (an RLinf FSDP folder looks the same: use --layout rlinf-fsdp)"
        ) from None
    checked = "sizes and checksums" if deep else "sizes"
    return f"{MANIFEST_NAME}: {len(manifest.files)} files, {checked} match"


LAYOUT = Layout("rljob", check)
