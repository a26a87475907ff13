"""rljob's own layout: a folder is complete exactly when its manifest says so.

The trainer writes its backend's state, then `data/data.pt`, and then, last and
atomically, `rljob_manifest.json` naming every file with its size and sha256. With FSDP
the state is `actor/` (DCP) and `actor/model/` (safetensors); with Megatron it is RLinf's
Megatron arrangement, `actor/iter_{N:07d}/` (dist_checkpointing) and then
`actor/latest_checkpointed_iteration.txt`. Quick: the manifest parses, is for this step,
and every file it lists has its size. Deep: every checksum matches too (which also covers
truncated archives). A folder without the manifest is never complete; for the Megatron
arrangement its reason says how far the save got, by the rlinf-megatron layout's check.
"""

from __future__ import annotations

from pathlib import Path

from rljob_contract.manifest import MANIFEST_NAME, ManifestMissing, check_complete

from ..probe import is_dir, names, size_of
from ..verdict import Corrupt, Incomplete
from . import rlinf_megatron
from .base import Layout


def check(folder: Path, step: int, deep: bool) -> str:
    """The contract's definition of complete, with the operator's confined file access."""
    try:
        manifest = check_complete(folder, step, deep=deep, size_of=size_of)
    except ManifestMissing as exc:
        raise ManifestMissing(_unsealed(folder, step, deep, exc)) from None
    checked = "sizes and checksums" if deep else "sizes"
    return f"{MANIFEST_NAME}: {len(manifest.files)} files, {checked} match"


def _unsealed(folder: Path, step: int, deep: bool, missing: ManifestMissing) -> str:
    """Why a folder without its manifest is not complete, and how far its save got."""
    if not _holds_megatron(folder):
        return f"{missing} (an RLinf FSDP folder looks the same: use --layout rlinf-fsdp)"
    try:
        done = rlinf_megatron.check_role(folder, "actor", step, deep)
        got = f"{done}; the manifest is written last"
    except (Incomplete, Corrupt) as exc:  # unsealed, so damage too is a save cut short
        got = str(exc)
    return f"{MANIFEST_NAME} is missing: the save did not finish ({got})"


def _holds_megatron(folder: Path) -> bool:
    """Whether `actor/` shows the Megatron arrangement: an iteration folder or the tracker."""
    if not is_dir(folder, "actor"):
        return False
    entries = names(folder, "actor")
    return rlinf_megatron.TRACKER in entries or any(n.startswith("iter_") for n in entries)


LAYOUT = Layout("rljob", check)
