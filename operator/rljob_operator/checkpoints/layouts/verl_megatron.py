"""verl with the Megatron backend.

Newer verl (checkpoint layout schema v2) writes per role `model/`, `optimizer/`,
`extra/` (each a Megatron `dist_ckpt/` or `huggingface/` tree) and, last,
`ckpt_contents.json`, a manifest mapping each content to its path and format. Older verl
writes one `dist_ckpt/` per role (Megatron dist_checkpointing, `metadata.json` written
after every shard) beside `huggingface/` and `transformer_config.json`.
"""

from __future__ import annotations

from pathlib import Path

from ..megatron import check_dist_ckpt
from ..probe import is_dir, join, names, nonempty_file, read_json, safe_relative
from ..verdict import Corrupt, Incomplete
from . import _verl
from .base import Layout

CONTENTS = "ckpt_contents.json"
_DIST_FORMAT = "megatron_dist_checkpoint"


def check_role(folder: Path, role: str, step: int, deep: bool) -> str:
    entries = set(names(folder, role))
    if CONTENTS in entries:
        return _check_contents(folder, role, step, deep)
    if "dist_ckpt" in entries:
        check_dist_ckpt(folder, join(role, "dist_ckpt"), deep)
        return f"{role}/dist_ckpt/ whole"
    raise Incomplete(
        f"{role}/{CONTENTS} is missing (verl writes it last) and there is no {role}/dist_ckpt/"
    )


def _check_contents(folder: Path, role: str, step: int, deep: bool) -> str:
    """Everything the manifest maps must be there; its absence now is damage, not a tear."""
    rel = join(role, CONTENTS)
    manifest = read_json(folder, rel, written_atomically=True)
    contents = manifest.get("contents") if isinstance(manifest, dict) else None
    if not isinstance(contents, dict) or not contents:
        raise Corrupt(f"{rel} maps no contents")
    if manifest.get("global_step", step) != step:
        raise Corrupt(f"{rel} is for step {manifest['global_step']}, the folder for step {step}")
    targets = set()
    for name, entry in contents.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise Corrupt(f"{rel}: content {name!r} has no path")
        targets.add((join(role, safe_relative(entry["path"])), entry.get("format")))
    try:
        for path, fmt in sorted(targets, key=str):
            if fmt == _DIST_FORMAT:
                check_dist_ckpt(folder, path, deep)
            elif not is_dir(folder, path):
                nonempty_file(folder, path)
    except Incomplete as exc:
        raise Corrupt(f"{exc}, though {rel} lists it") from exc
    return f"{rel}: {len(targets)} contents present"


def check(folder: Path, step: int, deep: bool) -> str:
    return _verl.check_run(folder, step, deep, check_role)


LAYOUT = Layout("verl-megatron", check, _verl.OPTIONAL_PARTS)
