"""Hugging Face's `Trainer` (and TRL's trainers on it): `<output_dir>/checkpoint-N/`.

`Trainer._save_checkpoint` writes the model (`model.safetensors`, or shards with
`model.safetensors.index.json`; `adapter_model.safetensors` for a PEFT adapter; the older
`pytorch_model.bin`), then `optimizer.pt` and `scheduler.pt` (not with `save_only_model`,
which saves no RNG either: such a folder reads as incomplete, the job's SaveOnNotice condition
says why at admission), each process's `rng_state[_R].pth`, and, from the main
process, `trainer_state.json` with `global_step`. There is no barrier before it: another
process's RNG file may come after it. A folder is complete when `trainer_state.json` names
its step, the files before it are there, and so are the RNG files: without one a resume goes
on silently with fresh generators and is no longer bit-exact (TRL 1.16, transformers 5.10).
The world size is not in the folder: a missing last rank's RNG file goes unseen, a gap in the
ranks does not. transformers' just-in-time save on SIGTERM (`enable_jit_checkpoint`) marks a
folder it is still writing with `checkpoint-is-incomplete.txt`.

Under DeepSpeed (`--deepspeed`), `_save_optimizer_and_scheduler` has DeepSpeed save into the
folder (`global_stepN/` and `latest`, layouts._deepspeed) in place of `optimizer.pt`, and
`trainer_state.json`, written after DeepSpeed's last barrier, says every rank's part is there.
Such a folder is complete with DeepSpeed's files of every rank in the folder `latest` names;
the weights (none under ZeRO-3 unless gathered) and `scheduler.pt` (DeepSpeed's own scheduler
is in its files) where the run wrote them, and the RNG files.

Under FSDP (`--fsdp`), accelerate's `save_fsdp_model` and `save_fsdp_optimizer` (1.16) write
the model and optimizer in place of `optimizer.pt`: with a full state dict
`pytorch_model_fsdp.bin` and `optimizer.bin` (rank 0), with a sharded one the DCP folders
`pytorch_model_fsdp_0/` and `optimizer_0/` (whole when DCP's `.metadata` is there). Such a folder
is complete with both, `scheduler.pt`, the RNG files and `trainer_state.json`, the weight files
where the run wrote them. Judged here: plain, DDP, DeepSpeed and FSDP runs; FSDP's per-rank
files without DCP (`use_dcp=False`) are not (their folder reads as incomplete).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..dcp import check_dcp
from ..probe import (
    exists,
    intact_safetensors,
    intact_zip,
    is_dir,
    names,
    nonempty_file,
    read_json,
)
from ..verdict import Corrupt, Incomplete
from . import _deepspeed
from .base import Layout

PREFIX = "checkpoint-"
JIT_MARKER = "checkpoint-is-incomplete.txt"
_RNG = re.compile(r"rng_state(?:_([0-9]+))?\.pth")
STATE = "trainer_state.json"
OPTIMIZER_FILES = ("optimizer.pt", "scheduler.pt")
SAFETENSORS_INDEX = "model.safetensors.index.json"
SINGLE_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin")
# FSDP's model and optimizer (accelerate): a full state dict's file, or a sharded one's DCP folder.
FSDP_MODEL = ("pytorch_model_fsdp.bin", "pytorch_model_fsdp_0")
FSDP_OPTIMIZER = ("optimizer.bin", "optimizer_0")


def _weights(folder: Path) -> list[str]:
    """The weight files the folder must hold, as its index or its single file names them."""
    if exists(folder, SAFETENSORS_INDEX):
        index = read_json(folder, SAFETENSORS_INDEX, written_atomically=False)
        shards = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(shards, dict) or not shards:
            raise Corrupt(f"{SAFETENSORS_INDEX} has no weight_map")
        return sorted({str(shard) for shard in shards.values()})
    present = [name for name in SINGLE_WEIGHTS if exists(folder, name)]
    if not present:
        raise Incomplete(f"no model weights ({', '.join(SINGLE_WEIGHTS)} or {SAFETENSORS_INDEX})")
    return present[:1]


def _rng_files(folder: Path) -> list[str]:
    """`rng_state.pth` (one process) or `rng_state_0..R.pth`, with no rank missing below R."""
    found = {m.group(1): n for n in names(folder, "") if (m := _RNG.fullmatch(n))}
    if not found:
        raise Incomplete("no rng_state*.pth: each process writes its own with the save")
    ranks = sorted(int(r) for r in found if r is not None)
    missing = sorted(set(range(ranks[-1] + 1)) - set(ranks)) if ranks else []
    if missing:
        raise Incomplete(
            f"rng_state_{missing[0]}.pth is missing (ranks up to {ranks[-1]} wrote theirs)"
        )
    return sorted(found.values())


def check(folder: Path, step: int, deep: bool) -> str:
    if exists(folder, JIT_MARKER):
        raise Incomplete(f"{JIT_MARKER}: transformers' save on SIGTERM did not finish")
    if not exists(folder, STATE):
        raise Incomplete(f"no {STATE}: the Trainer writes it last")
    state = read_json(folder, STATE, written_atomically=False)
    if not isinstance(state, dict) or state.get("global_step") != step:
        found = state.get("global_step") if isinstance(state, dict) else None
        raise Corrupt(f"{STATE} says global_step {found!r}, the folder's name {step}")
    tag = _deepspeed.latest_tag(folder)
    fsdp = not tag and any(exists(folder, name) for name in (*FSDP_MODEL, *FSDP_OPTIMIZER))
    if fsdp:
        engine = ", FSDP's " + " and ".join(_fsdp_part(folder, pair, deep)
                                            for pair in (FSDP_MODEL, FSDP_OPTIMIZER))  # fmt: skip
        weights = _weights(folder) if _has_weights(folder) else []
        saved = [*weights, *OPTIMIZER_FILES[1:]]
    elif tag is None:
        weights = _weights(folder)
        saved, engine = [*weights, *OPTIMIZER_FILES], ""
    else:
        engine = f", DeepSpeed's {tag}/ ({len(_deepspeed_files(folder, tag, deep))} files)"
        weights = _weights(folder) if _has_weights(folder) else []
        saved = [*weights, *(name for name in OPTIMIZER_FILES[1:] if exists(folder, name))]
    for name in saved:
        nonempty_file(folder, name, "the Trainer writes it before trainer_state.json")
    rng = _rng_files(folder)
    for name in rng:
        nonempty_file(folder, name, "its process writes it with the save")
    if deep:
        for name in (*saved, *rng):
            if name.endswith(".safetensors"):
                intact_safetensors(folder, name)
            else:
                intact_zip(folder, name)
    optimizer = "" if tag or fsdp else ", optimizer"
    return (f"{STATE} at step {step}, {len(weights)} weight file(s){optimizer}{engine}, "
            f"{len(rng)} RNG files")  # fmt: skip


def _fsdp_part(folder: Path, pair: tuple[str, str], deep: bool) -> str:
    """FSDP's file (a full state dict) or whole DCP folder (a sharded one) of the pair."""
    whole, sharded = pair
    if is_dir(folder, sharded):
        check_dcp(folder, sharded, deep)
        return f"{sharded}/"
    nonempty_file(folder, whole, f"FSDP saves it, or {sharded}/, before trainer_state.json")
    if deep:
        intact_zip(folder, whole)
    return whole


def _has_weights(folder: Path) -> bool:
    return any(exists(folder, name) for name in (SAFETENSORS_INDEX, *SINGLE_WEIGHTS))


def _deepspeed_files(folder: Path, tag: str, deep: bool) -> list[str]:
    """DeepSpeed's files of the tag `latest` names, every rank's."""
    if not is_dir(folder, tag):
        raise Incomplete(f"{tag}/ is missing: DeepSpeed's latest names it")
    try:
        return _deepspeed.shard_files(folder / tag, deep)
    except Incomplete as exc:
        raise Incomplete(f"{tag}/: {exc}") from None


LAYOUT = Layout("hf-trainer", check, folder_prefix=PREFIX)
