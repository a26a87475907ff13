"""DeepSpeed's own checkpoint folder, as `DeepSpeedEngine.save_checkpoint(save_dir, tag)` writes
it (read in DeepSpeed 0.19.6) under OpenRLHF and under Hugging Face's Trainer.

Every rank writes its model states (`mp_rank_TT_model_states.pt` from data-parallel rank 0 of
each tensor-parallel rank TT under ZeRO 0-2, one `zero_pp_rank_R_mp_rank_TT_model_states.pt`
per rank under ZeRO-3) and its optimizer shard (`[bf16_]zero_pp_rank_R_mp_rank_TT_optim_states.pt`)
into `<save_dir>/<tag>/`, each a plain `torch.save`. TT (two digits) is the model-parallel
rank: 00 without tensor parallelism, 00..T-1 under DeepSpeed's AutoTP (T =
`tensor_parallel.autotp_size`); R the data-parallel rank. Global rank 0 writes
`<save_dir>/latest` (the tag) right after its own files, before the ranks' last barrier, so
`latest` can name a folder that another rank is still writing: whatever its caller writes
after `save_checkpoint` returns is what says the folder is whole. The world size is not in
the folder: a missing last rank goes unseen, a gap does not.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..probe import intact_zip, names, nonempty_file, read_text
from ..verdict import Corrupt, Incomplete

LATEST = "latest"
_MODEL = re.compile(r"mp_rank_([0-9]{2,})_model_states\.pt")
_OPTIMIZER = re.compile(r"(?:bf16_)?zero_pp_rank_([0-9]+)_mp_rank_([0-9]{2,})_optim_states\.pt")
_ZERO3_MODEL = re.compile(r"zero_pp_rank_([0-9]+)_mp_rank_([0-9]{2,})_model_states\.pt")
_TAG = re.compile(r"[A-Za-z0-9_.-]+")


def latest_tag(save_dir: Path) -> str | None:
    """The tag `latest` names in `save_dir`, None where there is no `latest`."""
    text = read_text(save_dir, LATEST)
    if text is None:
        return None
    tag = text.strip()
    if not _TAG.fullmatch(tag) or tag in (".", ".."):
        raise Corrupt(f"{LATEST} names {tag[:60]!r}, no folder's name")
    return tag


def _ranks(found: set[int], what: str) -> None:
    missing = sorted(set(range(max(found) + 1)) - found)
    if missing:
        raise Incomplete(
            f"{what} of rank {missing[0]} is missing (ranks up to {max(found)} wrote theirs)"
        )


def _grid(found: dict[tuple[int, int], str], what: str) -> None:
    """Every (data-parallel, model-parallel) rank's file, with no gap in either."""
    data, model = {d for d, _ in found}, {m for _, m in found}
    _ranks(data, what)
    _ranks(model, f"{what} of model-parallel rank")
    for d in sorted(data):
        for m in sorted(model):
            if (d, m) not in found:
                raise Incomplete(f"{what} of rank {d}, model-parallel rank {m:02d}, is missing")


def shard_files(folder: Path, deep: bool) -> list[str]:
    """The DeepSpeed files of one saved tag's folder; Incomplete where a rank's part is missing
    or empty, Corrupt (deep) where a file is cut short."""
    listed = names(folder, "")
    optimizer = {
        (int(m.group(1)), int(m.group(2))): n for n in listed if (m := _OPTIMIZER.fullmatch(n))
    }
    if not optimizer:
        raise Incomplete("no *zero_pp_rank_R_mp_rank_TT_optim_states.pt: every rank writes one")
    _grid(optimizer, "the optimizer shard")
    zero3 = {
        (int(m.group(1)), int(m.group(2))): n for n in listed if (m := _ZERO3_MODEL.fullmatch(n))
    }
    if zero3:
        _grid(zero3, "the model states file")
        if set(zero3) != set(optimizer):
            raise Incomplete("the model states and optimizer shards are of different ranks")
        model = sorted(zero3.values())
    else:
        tensor_parallel = sorted({m for _, m in optimizer})
        model = [f"mp_rank_{m:02d}_model_states.pt" for m in tensor_parallel]
        stray = [n for n in listed if (m := _MODEL.fullmatch(n)) and int(m.group(1)) not in
                 tensor_parallel]  # fmt: skip
        if stray:
            raise Incomplete(f"{stray[0]} has no optimizer shard of its model-parallel rank")
    files = [*model, *sorted(optimizer.values())]
    for name in files:
        nonempty_file(folder, name, "DeepSpeed writes every rank's before its last barrier")
    if deep:
        for name in files:
            intact_zip(folder, name)
    return files
