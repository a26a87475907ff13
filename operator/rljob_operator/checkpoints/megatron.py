"""Rules for the two on-disk formats of Megatron checkpoints, shared by RLinf and verl.

Legacy (`ckpt_format: torch`): one folder per model-parallel rank,
`mp_rank_{TP:02d}` or `mp_rank_{TP:02d}_{PP:03d}` with a further `_{EP:03d}` under expert
parallelism, each holding `model_optim_rng.pt` and, with the distributed optimizer,
`distrib_optim.pt`.

Distributed (`torch_dist`, megatron.core.dist_checkpointing): a DCP folder plus
`common.pt`, and `metadata.json`, which rank 0 writes in place after every shard is on
disk (its "finalize" step, also for asynchronous saves). Its pieces come in that order,
the shards, DCP's `.metadata`, then `metadata.json`, and a torn save is named by the
first piece it lacks: that says how far it got.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from .dcp import METADATA, METADATA_TMP, SHARD, check_dcp
from .probe import intact_zip, join, names, nonempty_file, read_json, size_of
from .verdict import Corrupt, Incomplete

_MP_RANK = re.compile(r"mp_rank_([0-9]{2})((?:_[0-9]{3}){0,2})")
MODEL_FILE = "model_optim_rng.pt"
OPTIM_FILE = "distrib_optim.pt"
DIST_MARKER = "metadata.json"
COMMON_FILE = "common.pt"
_DIST_NAMES = frozenset({DIST_MARKER, COMMON_FILE, METADATA, METADATA_TMP})


def is_dist_ckpt(entries: list[str]) -> bool:
    """Whether a folder holding `entries` is dist_checkpointing's rather than the legacy
    per-rank folders: any of its files tells, even in a save torn before its markers."""
    return any(name in _DIST_NAMES or SHARD.fullmatch(name) for name in entries)


def check_mp_rank_grid(folder: Path, rel: str, deep: bool) -> None:
    """Every (TP, PP[, EP]) rank folder up to the highest seen, each with its files.

    The ranks' counts are not written anywhere we can read without unpickling, so a
    missing *highest* rank cannot be told from a smaller model-parallel size; the tracker
    that Megatron writes after every rank has saved covers that case.
    """
    coords: dict[tuple[int, ...], str] = {}
    for name in names(folder, rel):
        match = _MP_RANK.fullmatch(name)
        if match:
            rest = match.group(2)
            coords[(int(match.group(1)), *(int(p) for p in rest.split("_")[1:]))] = name
    if not coords:
        raise Incomplete(f"{rel}/ holds no mp_rank_* folders")
    if len({len(c) for c in coords}) != 1:
        raise Corrupt(f"{rel}/ mixes mp_rank_* names of different shapes")
    extents = [max(c[i] for c in coords) + 1 for i in range(len(next(iter(coords))))]
    for coord in itertools.product(*(range(n) for n in extents)):
        if coord not in coords:
            shown = "_".join([f"{coord[0]:02d}", *(f"{c:03d}" for c in coord[1:])])
            raise Incomplete(f"{rel}/mp_rank_{shown}/ is missing")
    files = [MODEL_FILE]
    if any(size_of(folder, join(rel, d, OPTIM_FILE)) is not None for d in coords.values()):
        files.append(OPTIM_FILE)  # the distributed optimizer writes one beside every model file
    for directory in sorted(coords.values()):
        for file in files:
            path = join(rel, directory, file)
            nonempty_file(folder, path)
            if deep:
                intact_zip(folder, path)


def check_dist_ckpt(folder: Path, rel: str, deep: bool) -> None:
    """A megatron.core.dist_checkpointing folder whose save has been finalized."""
    marker = join(rel, DIST_MARKER)
    if size_of(folder, marker) is None:
        check_dcp(folder, rel, deep=False)  # a save torn before DCP's .metadata says so first
        raise Incomplete(f"{marker} is missing: Megatron writes it after every shard")
    config = read_json(folder, marker, written_atomically=False)
    backend = config.get("sharded_backend") if isinstance(config, dict) else None
    if not isinstance(backend, str):
        raise Corrupt(f"{marker} names no sharded_backend")
    if not backend.startswith("torch_dist"):
        raise Incomplete(f"{marker}: sharded_backend {backend!r} cannot be verified")
    check_dcp(folder, rel, deep)
    if deep and size_of(folder, join(rel, COMMON_FILE)) is not None:
        intact_zip(folder, join(rel, COMMON_FILE))
