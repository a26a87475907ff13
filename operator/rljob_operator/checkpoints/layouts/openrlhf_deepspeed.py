"""OpenRLHF (0.11, DeepSpeed): `<ckpt.path>/_actor/global_stepN/`, and `_critic/global_stepN/`
beside it where the algorithm has a critic (PPO). The job's checkpoint directory is `_actor`.

Read in OpenRLHF 0.11.2 (not run here: it imports vLLM, flash-attn and DeepSpeed at its
modules' tops). `DeepspeedStrategy.save_ckpt` rotates old folders, then every rank runs
DeepSpeed's `save_checkpoint` (layouts._deepspeed: its `latest` can name a folder that is not
whole yet), and after it returns rank 0 writes `metric.json` into the folder: the one file
that says every rank's part is there. A folder is complete with `metric.json` and DeepSpeed's
files of every rank, and, where `_critic/` exists, the same for the critic's folder of the step.

Not judged: DeepSpeed's universal checkpoints (`--ds.use_universal_ckpt`, `latest_universal`)
and OpenRLHF's best-metric folders (`best_global_stepN`, which the prefix leaves out).
"""

from __future__ import annotations

from pathlib import Path

from ..probe import exists, is_dir, read_json
from ..verdict import Incomplete
from . import _deepspeed
from .base import Layout

PREFIX = "global_step"  # DeepSpeed's tag, f"global_step{N}": no underscore before N
METRIC = "metric.json"
ACTOR, CRITIC = "_actor", "_critic"


def _role(folder: Path, deep: bool) -> list[str]:
    """The files of one role's folder (actor or critic); Incomplete where the save did not end."""
    if not exists(folder, METRIC):
        raise Incomplete(f"no {METRIC}: OpenRLHF writes it last, once every rank has saved")
    read_json(folder, METRIC, written_atomically=False)
    return _deepspeed.shard_files(folder, deep)


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
