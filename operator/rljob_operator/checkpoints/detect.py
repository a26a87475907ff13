"""`--layout auto`: which layout a folder is in, from the names of the files it holds.

A directory whose `progress.json` sits beside its global_step_N folders is written by
rljob's own trainer, which seals every folder with its manifest whatever its backend: all
its folders are read as rljob. Its Megatron arrangement (`actor/iter_*`, the tracker) would
otherwise read as rlinf-megatron, complete before the manifest that the trainer demands.

Elsewhere each folder is read by the layout its own files show, when they show one decisively
(a file only that layout writes). A folder that shows none, typically a save torn
before its distinctive files, is read by the directory's layout: the decisive layout of
the newest folder that has one, else the first hint. The ambiguous case is DCP shards
straight in `actor/` with no manifest: that is rljob before the trainer sealed the
folder, or RLinf FSDP from before 2026; auto takes the stricter reading (rljob, never
complete without its manifest) and says so in the reason.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rljob_contract.manifest import MANIFEST_NAME
from rljob_contract.progress import PROGRESS_FILE_NAME

from .candidates import Candidate
from .layouts import _verl


@dataclass(frozen=True)
class Rule:
    inside: str  # "" for the global_step_N folder itself, "actor" for its actor/ folder
    pattern: str  # fnmatch pattern for the name of an entry there
    layout: str


DECISIVE = (
    Rule("", MANIFEST_NAME, "rljob"),
    Rule("actor", "ckpt_contents.json", "verl-megatron"),
    Rule("actor", "dist_ckpt", "verl-megatron"),
    Rule("actor", "transformer_config.json", "verl-megatron"),
    Rule("actor", "fsdp_config.json", "verl-fsdp"),
    Rule("actor", "model_world_size_*_rank_*.pt", "verl-fsdp"),
    Rule("actor", "latest_checkpointed_iteration.txt", "rlinf-megatron"),
    Rule("actor", "iter_*", "rlinf-megatron"),
    Rule("actor", "dcp_checkpoint", "rlinf-fsdp"),
    Rule("actor", "local_shard_checkpoint", "rlinf-fsdp"),
    Rule("actor", "model_state_dict", "rlinf-fsdp"),
    Rule("", ".metadata", "dcp"),
    Rule("", "*.distcp", "dcp"),
)
HINTS = (
    Rule("actor", ".metadata", "rljob"),
    Rule("actor", "*.distcp", "rljob"),
    Rule("", _verl.DATA, "verl-fsdp"),  # verl, maybe a folder its retention emptied
)


def writer_layout(directory: Path) -> str | None:
    """rljob where `directory` holds the progress.json of rljob's trainer, which then wrote
    every folder there; None where nothing names the writer."""
    return "rljob" if os.path.isfile(directory / PROGRESS_FILE_NAME) else None


def folder_layout(folder: Path) -> str | None:
    """The layout `folder`'s own files show decisively, None if they show none."""
    return _first_match(DECISIVE, _entries(folder))


def directory_layout(directory: Path, candidates: Iterable[Candidate]) -> str | None:
    """The layout for folders that show none: newest decisive, else first hint, else verl
    if the directory holds verl's tracker, else None."""
    hint = None
    for candidate in candidates:
        if candidate.problem is not None:
            continue
        entries = _entries(candidate.path)
        decisive = _first_match(DECISIVE, entries)
        if decisive:
            return decisive
        hint = hint or _first_match(HINTS, entries)
    if hint is None and (directory / _verl.TRACKER).is_file():
        hint = "verl-fsdp"
    return hint


def _entries(folder: Path) -> dict[str, list[str]]:
    """Names in the folder and in its actor/; unreadable parts read as empty."""
    found: dict[str, list[str]] = {}
    for inside in ("", "actor"):
        try:
            found[inside] = os.listdir(folder / inside)
        except OSError:
            found[inside] = []
        if "actor" not in found[""]:
            break
    return found


def _first_match(rules: tuple[Rule, ...], entries: dict[str, list[str]]) -> str | None:
    for rule in rules:
        if fnmatch.filter(entries.get(rule.inside, []), rule.pattern):
            return rule.layout
    return None
