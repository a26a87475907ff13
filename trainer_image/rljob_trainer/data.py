"""A deterministic, seeded, stateful prompt sampler, sharded by rank.

The sampler walks one global stream of example indices: epoch e is a permutation of the data
set drawn from a generator seeded with (seed, e). Each step takes the next `prompts_per_step`
indices of that stream and rank r keeps its contiguous slice. The state (epoch, position) is
the same on every rank and does not depend on the number of ranks, so rank 0 saves it once and
a run with a different world size continues the same stream, only sliced differently.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_examples, generator=generator).tolist()


class PromptSampler(Stateful):
    def __init__(
        self, num_examples: int, prompts_per_step: int, seed: int, rank: int, world_size: int
    ) -> None:
        if prompts_per_step % world_size:
            raise ValueError(
                f"data.prompts_per_step ({prompts_per_step}) must be divisible by the number "
                f"of ranks ({world_size})"
            )
        self.num_examples = num_examples
        self.prompts_per_step = prompts_per_step
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.position = 0
        self._order = epoch_permutation(num_examples, seed, 0)

    def next_global_batch(self) -> list[int]:
        """The next `prompts_per_step` indices of the stream, crossing epochs as needed."""
        batch: list[int] = []
        while len(batch) < self.prompts_per_step:
            if self.position == self.num_examples:
                self.epoch += 1
                self.position = 0
                self._order = epoch_permutation(self.num_examples, self.seed, self.epoch)
            take = min(self.prompts_per_step - len(batch), self.num_examples - self.position)
            batch.extend(self._order[self.position : self.position + take])
            self.position += take
        return batch

    def next_local_batch(self) -> list[int]:
        per_rank = self.prompts_per_step // self.world_size
        batch = self.next_global_batch()
        return batch[self.rank * per_rank : (self.rank + 1) * per_rank]

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_examples": self.num_examples,
            "prompts_per_step": self.prompts_per_step,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for key in ("seed", "num_examples", "prompts_per_step"):
            if state_dict[key] != getattr(self, key):
                raise ValueError(
                    f"data state was saved with {key}={state_dict[key]}, this run has "
                    f"{getattr(self, key)}; the prompt stream would differ"
                )
        self.epoch = int(state_dict["epoch"])
        self.position = int(state_dict["position"])
        self._order = epoch_permutation(self.num_examples, self.seed, self.epoch)
