"""Hugging Face's `Trainer` (and TRL's trainers on it): `<output_dir>/checkpoint-N/`.

`Trainer._save_checkpoint` writes the model (`model.safetensors`, or shards with
`model.safetensors.index.json`; `adapter_model.safetensors` for a PEFT adapter; the older
`pytorch_model.bin`), then `optimizer.pt` and `scheduler.pt` (not with `save_only_model`,
from which training cannot resume), each process's `rng_state[_R].pth`, and last, from the
main process, `trainer_state.json` with `global_step`. A folder is complete when that last
file names its step and what it names before it is there. The RNG files are not required:
`resume_from_checkpoint` warns without them and goes on.

Judged here: plain and DDP runs. FSDP's sharded optimizer (`optimizer_0/`) and DeepSpeed's
own `global_stepN/` inside the folder are not (a folder of theirs reads as incomplete).
"""

from __future__ import annotations

from pathlib import Path

from ..probe import exists, intact_safetensors, intact_zip, names, nonempty_file, read_json
from ..verdict import Corrupt, Incomplete
from .base import Layout

PREFIX = "checkpoint-"
STATE = "trainer_state.json"
OPTIMIZER_FILES = ("optimizer.pt", "scheduler.pt")
SAFETENSORS_INDEX = "model.safetensors.index.json"
SINGLE_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin")


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


def check(folder: Path, step: int, deep: bool) -> str:
    if not exists(folder, STATE):
        raise Incomplete(f"no {STATE}: the Trainer writes it last")
    state = read_json(folder, STATE, written_atomically=False)
    if not isinstance(state, dict) or state.get("global_step") != step:
        found = state.get("global_step") if isinstance(state, dict) else None
        raise Corrupt(f"{STATE} says global_step {found!r}, the folder's name {step}")
    weights = _weights(folder)
    for name in (*weights, *OPTIMIZER_FILES):
        nonempty_file(folder, name, "the Trainer writes it before trainer_state.json")
        if deep:
            if name.endswith(".safetensors"):
                intact_safetensors(folder, name)
            else:
                intact_zip(folder, name)
    rng = [n for n in names(folder, "") if n.startswith("rng_state") and n.endswith(".pth")]
    return f"{STATE} at step {step}, {len(weights)} weight file(s), optimizer, {len(rng)} RNG files"


LAYOUT = Layout("hf-trainer", check, folder_prefix=PREFIX)
