"""Stop on request: SIGTERM or the operator's checkpoint-request file, agreed at a step boundary.

Kubernetes sends SIGTERM before it kills a pod (torchrun forwards it to every worker); the
operator asks for a checkpoint by annotating the pod, which a downward-API volume projects into
a file that is empty until then. Either way the ranks finish the current step, agree with one
all_reduce(MAX) so that all of them stop at the same step, save, and exit with
EXIT_CHECKPOINTED_ON_REQUEST (75).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist


class StopRequest:
    """Remembers a SIGTERM and polls the request file; checking is cheap, so it runs every step."""

    def __init__(self, request_file: str | None) -> None:
        self.request_file = Path(request_file) if request_file else None
        self.signal_name: str | None = None
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name

    def reason(self) -> str | None:
        """Why this rank wants to stop, or None."""
        if self.signal_name:
            return self.signal_name
        if self.request_file is not None:
            try:
                request = self.request_file.read_text().strip()
            except OSError:
                return None  # not projected (yet): no request
            if request:
                return f"checkpoint request {request!r} in {self.request_file}"
        return None


def agree_any(flags: Sequence[bool]) -> list[bool]:
    """For each flag, whether any rank set it (one all_reduce MAX over a CPU tensor)."""
    tensor = torch.tensor([int(f) for f in flags], dtype=torch.int32)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [bool(v) for v in tensor.tolist()]
