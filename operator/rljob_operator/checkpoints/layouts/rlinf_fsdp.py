"""RLinf with the FSDP/FSDP2 backend.

Per role (`actor/`, `critic/`): the training state as DCP in `dcp_checkpoint/` (RLinf
since January 2026; before, straight in the role folder), or with
`checkpoint_format: local_shard` one `local_shard_checkpoint/checkpoint_rank_{R}.pt`
per rank. After the shards, rank 0 may write the full weights:
`model_state_dict/full_weights.pt` (now) or sharded safetensors with their index in
`model/` or `huggingface_model/` (late 2025).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..dcp import check_dcp
from ..probe import (
    intact_safetensors,
    intact_zip,
    join,
    names,
    nonempty_file,
    read_json,
    safe_relative,
)
from ..verdict import Corrupt, Incomplete
from . import _rlinf
from .base import Layout

_LOCAL_SHARD = re.compile(r"checkpoint_rank_([0-9]+)\.pt")
_HF_FOLDERS = ("model", "huggingface_model")
FULL_WEIGHTS = "model_state_dict/full_weights.pt"


def check_role(folder: Path, role: str, step: int, deep: bool) -> str:
    entries = set(names(folder, role))
    if "dcp_checkpoint" in entries:
        check_dcp(folder, join(role, "dcp_checkpoint"), deep)
    elif "local_shard_checkpoint" in entries:
        _check_local_shards(folder, join(role, "local_shard_checkpoint"), deep)
    else:
        check_dcp(folder, role, deep)
    if "model_state_dict" in entries:
        weights = join(role, FULL_WEIGHTS)
        nonempty_file(folder, weights, "rank 0 writes it after the shards")
        if deep:
            intact_zip(folder, weights)
    for hf in sorted(entries.intersection(_HF_FOLDERS)):
        _check_safetensors_folder(folder, join(role, hf), deep)
    return f"{role}/ whole"


def _check_local_shards(folder: Path, rel: str, deep: bool) -> None:
    """Ranks 0..highest all present; a missing highest rank cannot be seen here."""
    ranks = {int(m.group(1)) for n in names(folder, rel) if (m := _LOCAL_SHARD.fullmatch(n))}
    if not ranks:
        raise Incomplete(f"{rel}/ holds no checkpoint_rank_R.pt files")
    for rank in range(max(ranks) + 1):
        path = join(rel, f"checkpoint_rank_{rank}.pt")
        nonempty_file(folder, path)
        if deep:
            intact_zip(folder, path)


def _check_safetensors_folder(folder: Path, rel: str, deep: bool) -> None:
    """The shards its index names (the index is written after them), else all shards."""
    entries = names(folder, rel)
    indexes = sorted(n for n in entries if n.endswith(".safetensors.index.json"))
    if indexes:
        index = read_json(folder, join(rel, indexes[0]), written_atomically=False)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise Corrupt(f"{join(rel, indexes[0])} has no weight_map")
        shards = sorted({safe_relative(str(v)) for v in weight_map.values()})
    else:
        shards = sorted(n for n in entries if n.endswith(".safetensors"))
        if not shards:
            raise Incomplete(f"{rel}/ holds no safetensors files")
    for shard in shards:
        path = join(rel, shard)
        nonempty_file(folder, path)
        if deep:
            intact_safetensors(folder, path)


def check(folder: Path, step: int, deep: bool) -> str:
    return _rlinf.check_run(folder, step, deep, check_role)


LAYOUT = Layout("rlinf-fsdp", check, _rlinf.OPTIONAL_PARTS)
