"""Load a Megatron checkpoint's model into a GPTModel on one rank, the way megatron does it.

`python megatron_whole_model.py <iter_dir> <out.pt> key=value ...` (the trainer's config
overrides): megatron's own dist_checkpointing re-shards the saved TP/PP split into a single
rank's model, whose state dict is what `rljob ckpt convert` must produce.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist


def main(iteration: str, out: str, overrides: list[str]) -> None:
    from megatron.core import dist_checkpointing
    from rljob_trainer.config import load_config
    from rljob_trainer.megatron.model import build_gpt, init_parallel, transformer_config
    from rljob_trainer.task import CharTokenizer

    cfg = load_config(None, [*overrides, "runner.backend=megatron"], env={})
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    init_parallel(cfg.megatron, cfg.runner.seed, on_cpu=True)
    gpt = build_gpt(
        cfg.model,
        CharTokenizer().vocab_size,
        transformer_config(cfg.model),
        cfg.runner.seed + 1,  # different initial weights: all of them must come from the file
        torch.device("cpu"),
    )
    loaded = dist_checkpointing.load({"model": gpt.sharded_state_dict()}, iteration)
    gpt.load_state_dict(loaded["model"])
    state = {k: v for k, v in gpt.state_dict().items() if "_extra_state" not in k}
    torch.save(state, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
