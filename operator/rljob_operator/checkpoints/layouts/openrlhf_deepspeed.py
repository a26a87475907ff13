"""OpenRLHF (0.11, DeepSpeed): `<ckpt.path>/_actor/global_stepN/`, and `_critic/global_stepN/`
beside it where the algorithm has a critic (PPO). The job's checkpoint directory is `_actor`.

Read in OpenRLHF 0.11.2 and DeepSpeed 0.19.6, which it pins (not run here: OpenRLHF imports
vLLM, flash-attn and DeepSpeed at its modules' tops). `DeepspeedStrategy.save_ckpt` rotates old
folders, then every rank runs DeepSpeed's `save_checkpoint`: its model states
(`mp_rank_00_model_states.pt` from data-parallel rank 0 under ZeRO 0-2, one
`zero_pp_rank_R_mp_rank_00_model_states.pt` per rank under ZeRO-3) and its optimizer shard
(`[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt`), each a plain `torch.save`; global rank 0
writes DeepSpeed's `latest` right after its own files and before the ranks' last barrier, so
`latest` can name a folder another rank is still writing. After that barrier rank 0 writes
`metric.json` into the folder: the one file that says every rank's part is there. A folder is
complete with `metric.json`, an optimizer shard for every rank from 0 up with no gap, the model
states that go with them, and, where `_critic/` exists, the same for the critic's folder of the
step. The world size is not in the folder: a missing last rank goes unseen, a gap does not.

Not judged: DeepSpeed's universal checkpoints (`--ds.use_universal_ckpt`, `latest_universal`)
and OpenRLHF's best-metric folders (`best_global_stepN`, which the prefix leaves out).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..probe import exists, intact_zip, is_dir, names, nonempty_file, read_json
from ..verdict import Incomplete
from .base import Layout

PREFIX = "global_step"  # DeepSpeed's tag, f"global_step{N}": no underscore before N
METRIC = "metric.json"
ACTOR, CRITIC = "_actor", "_critic"
_OPTIMIZER = re.compile(r"(?:bf16_)?zero_pp_rank_([0-9]+)_mp_rank_00_optim_states\.pt")
_ZERO3_MODEL = re.compile(r"zero_pp_rank_([0-9]+)_mp_rank_00_model_states\.pt")
MODEL = "mp_rank_00_model_states.pt"


def _ranks(found: dict[int, str], what: str) -> None:
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise Incomplete(
            f"{what} of rank {missing[0]} is missing (ranks up to {max(found)} wrote theirs)"
        )


def _role(folder: Path, deep: bool) -> list[str]:
    """The files of one role's folder (actor or critic); Incomplete where the save did not end."""
    if not exists(folder, METRIC):
        raise Incomplete(f"no {METRIC}: OpenRLHF writes it last, once every rank has saved")
    read_json(folder, METRIC, written_atomically=False)
    listed = names(folder, "")
    optimizer = {int(m.group(1)): n for n in listed if (m := _OPTIMIZER.fullmatch(n))}
    if not optimizer:
        raise Incomplete("no *zero_pp_rank_R_mp_rank_00_optim_states.pt: every rank writes one")
    _ranks(optimizer, "the optimizer shard")
    zero3 = {int(m.group(1)): n for n in listed if (m := _ZERO3_MODEL.fullmatch(n))}
    if zero3:
        _ranks(zero3, "the model states file")
        if set(zero3) != set(optimizer):
            raise Incomplete("the model states and optimizer shards are of different ranks")
        model = sorted(zero3.values())
    else:
        model = [MODEL]
    files = [*model, *sorted(optimizer.values())]
    for name in files:
        nonempty_file(folder, name, "DeepSpeed writes it before metric.json")
    if deep:
        for name in files:
            intact_zip(folder, name)
    return files


def check(folder: Path, step: int, deep: bool) -> str:
    files = _role(folder, deep)
    summary = f"{METRIC}, {len(files)} DeepSpeed files"
    root = folder.parent.parent
    if folder.parent.name == ACTOR and is_dir(root, CRITIC):
        critic = root / CRITIC
        if not is_dir(critic, folder.name):
            raise Incomplete(
                f"{CRITIC}/{folder.name} is missing: the critic saves every step the actor does"
            )
        try:
            critic_files = _role(critic / folder.name, deep)
        except Incomplete as exc:
            raise Incomplete(f"{CRITIC}/{folder.name}: {exc}") from None
        summary += f"; the critic's: {len(critic_files)} DeepSpeed files"
    return summary


LAYOUT = Layout("openrlhf-deepspeed", check, folder_prefix=PREFIX)
