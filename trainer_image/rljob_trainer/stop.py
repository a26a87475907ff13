"""Stop on request: SIGTERM or the operator's checkpoint-request file, agreed by all ranks.

Kubernetes sends SIGTERM before it kills a pod (torchrun forwards it to every worker); the
operator asks for a checkpoint by annotating the pod, which a downward-API volume projects into
a file that is empty until then, and whose value may say when the node goes. Either way is a
notice: this rank remembers when it came, so that the loop knows its deadline
(`rljob_trainer.deadline`), and the ranks agree with one
all_reduce(MAX) per check (at each token of a rollout and at each step boundary) so that all of
them stop at the same point, save, and exit with EXIT_CHECKPOINTED_ON_REQUEST (75).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from rljob_contract.request import parse_request


class StopRequest:
    """Remembers a SIGTERM and polls the request file; checking is cheap, so it runs at every
    token of a rollout. `noticed_at` is when this rank first learned of either, and
    `node_ends_at` when the request says the node goes, if it says (both monotonic)."""

    def __init__(self, request_file: str | None) -> None:
        self.request_file = Path(request_file) if request_file else None
        self.signal_name: str | None = None
        self.request: str | None = None
        self.noticed_at: float | None = None
        self.node_ends_at: float | None = None
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._noticed()

    def _noticed(self) -> None:
        if self.noticed_at is None:
            self.noticed_at = time.monotonic()

    def reason(self) -> str | None:
        """Why this rank wants to stop, or None. The request is read after a SIGTERM too,
        since only it says when the node goes."""
        if self.request is None and self.request_file is not None:
            try:
                request = self.request_file.read_text().strip()
            except OSError:
                request = ""  # not projected (yet): no request
            if request:
                self.request = f"checkpoint request {request!r} in {self.request_file}"
                self._noticed()
                deadline = parse_request(request).deadline
                if deadline is not None:  # the operator's clock, on this rank's monotonic one
                    self.node_ends_at = time.monotonic() + deadline.timestamp() - time.time()
        return self.signal_name or self.request


def agree_max(values: Sequence[int]) -> list[int]:
    """For each value, the largest any rank passed (one all_reduce MAX over a CPU tensor)."""
    tensor = torch.tensor(list(values), dtype=torch.int32)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(v) for v in tensor.tolist()]
