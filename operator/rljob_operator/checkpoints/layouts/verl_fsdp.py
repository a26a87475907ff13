"""verl with the FSDP backend: every rank torch.saves its own shard of each kind.

Per role: `{model,optim,extra_state}_world_size_{W}_rank_{R}.pt` for R in 0..W-1
(model always; optimizer and extra as configured in checkpoint.save_contents, all three
by default), `fsdp_config.json` with W (verl since 2025; older folders lack it) and
`huggingface/` with config and tokenizer.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..probe import intact_zip, join, names, nonempty_file, read_json
from ..verdict import Corrupt, Incomplete
from . import _verl
from .base import Layout

_SHARD = re.compile(r"(model|optim|extra_state)_world_size_([0-9]+)_rank_([0-9]+)\.pt")
_KINDS = ("model", "optim", "extra_state")
CONFIG = "fsdp_config.json"


def check_role(folder: Path, role: str, step: int, deep: bool) -> str:
    entries = names(folder, role)
    shards = [(m.group(1), int(m.group(2))) for n in entries if (m := _SHARD.fullmatch(n))]
    world = _world_size(folder, role, CONFIG in entries, {w for _, w in shards})
    kinds = [k for k in _KINDS if k == "model" or (k, world) in shards]
    for kind in kinds:
        for rank in range(world):
            path = join(role, f"{kind}_world_size_{world}_rank_{rank}.pt")
            nonempty_file(folder, path)
            if deep:
                intact_zip(folder, path)
    return f"{role}/: {'+'.join(kinds)} for {world} ranks"


def _world_size(folder: Path, role: str, has_config: bool, seen: set[int]) -> int:
    if has_config:
        config = read_json(folder, join(role, CONFIG), written_atomically=False)
        world = config.get("world_size") if isinstance(config, dict) else None
        if not isinstance(world, int) or world < 1:
            raise Corrupt(f"{role}/{CONFIG} has no valid world_size")
        return world
    if not seen:
        raise Incomplete(f"{role}/ holds no model_world_size_W_rank_R.pt files")
    if len(seen) > 1:
        raise Incomplete(f"{role}/ holds shards for world sizes {sorted(seen)} and no {CONFIG}")
    return seen.pop()


def check(folder: Path, step: int, deep: bool) -> str:
    return _verl.check_run(folder, step, deep, check_role)


LAYOUT = Layout("verl-fsdp", check, _verl.OPTIONAL_PARTS)
