"""Stop on request: SIGTERM or the operator's checkpoint-request file, agreed by all ranks.

Kubernetes sends SIGTERM before it kills a pod (torchrun forwards it to every worker); the
operator asks for a checkpoint by annotating the pod, which a downward-API volume projects into
a file that is empty until then, and whose value may say when the node goes. Either way is a
notice: this rank remembers when it came, so that the loop knows its deadline
(`rljob_trainer.deadline`), and the ranks agree with an all_reduce(MAX) so that all of them
stop at the same point, save, and exit with EXIT_CHECKPOINTED_ON_REQUEST (75): a blocking one
at each step boundary, and during a rollout one per token that is posted before the token's
forward pass and read before the next (`PendingMax`), so that no rank waits for the others
at a token: the round trip overlaps the forward pass, and a notice is agreed one token later.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from rljob_contract.request import RequestFile


class StopRequest:
    """Remembers a SIGTERM and polls the request file; checking is cheap, so it runs at every
    token of a rollout. `noticed_at` is when this rank first learned of either, and
    `node_ends_at` when the request says the node goes, if it says, and `node_told_at` when
    that was read (all monotonic). The file is read at every check, also after a request: the
    operator writes it again when the gang's deadline moves earlier, and the earliest deadline
    read stands (`RequestFile`). In a warm gang the operator's word naming a newer attempt
    (`newer_attempt`, polled alike) is a third: the pod stays, and the rank holds its state
    after the save (`rljob_trainer.warm`)."""

    def __init__(
        self, request_file: str | None, newer_attempt: Callable[[], int | None] | None = None
    ) -> None:
        self.request_file = Path(request_file) if request_file else None
        self.file = RequestFile(request_file)
        self.newer_attempt = newer_attempt
        self.signal_name: str | None = None
        self.request: str | None = None
        self.named: str | None = None
        self.noticed_at: float | None = None
        signal.signal(signal.SIGTERM, self._on_signal)

    @property
    def node_ends_at(self) -> float | None:
        return self.file.node_ends_at

    @property
    def node_told_at(self) -> float | None:
        return self.file.told_at

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._noticed()

    def _noticed(self) -> None:
        if self.noticed_at is None:
            self.noticed_at = time.monotonic()

    def reason(self) -> str | None:
        """Why this rank wants to stop, or None. The request is read after a SIGTERM too,
        since only it says when the node goes."""
        if self.file.poll():
            self.request = f"checkpoint request {self.file.value!r} in {self.request_file}"
            self._noticed()
        if self.named is None and self.newer_attempt is not None:
            attempt = self.newer_attempt()
            if attempt is not None:
                self.named = f"the operator named attempt {attempt}"
                self._noticed()
        return self.signal_name or self.request or self.named


class PendingMax:
    """An all_reduce(MAX) over a CPU tensor, posted now and read later: every rank must post
    the same sequence of them, and read each once."""

    def __init__(self, values: Sequence[int]) -> None:
        self.tensor = torch.tensor(list(values), dtype=torch.int32)
        self.work = dist.all_reduce(self.tensor, op=dist.ReduceOp.MAX, async_op=True)

    def result(self) -> list[int]:
        """For each value, the largest any rank posted (waits for the slowest rank)."""
        self.work.wait()
        return [int(v) for v in self.tensor.tolist()]


def agree_max(values: Sequence[int]) -> list[int]:
    """For each value, the largest any rank passed, at once."""
    return PendingMax(values).result()
