"""The trainer's own process group, formed once per attempt, for a warm restart.

Under torchrun's rendezvous a process cannot outlive its gang: a new member means a new
rendezvous of every node's torchrun, and torchrun starts its workers again. For a warm restart
(`rljob_trainer.warm`) the trainer forms the group itself instead: torchrun starts only this
node's processes, and every process joins attempt N's group through one TCP store at the gang's
address (node 0's stable name), under a key prefix of its own per attempt, so that a process
that keeps its state can join attempt N+1's group beside a new member. Rank 0 hosts the store
and keeps hosting it across its own attempts; a new rank 0 (its pod replaced) hosts a new one
at the same name.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from rljob_trainer.place import Place

log = logging.getLogger(__name__)

# How long a member waits for the others (and a client for the store's host) at a join: the
# new pod of a lost rank may still be starting its interpreter.
JOIN_TIMEOUT = timedelta(minutes=10)


def attempt_prefix(attempt: int) -> str:
    """The store's keys of one attempt's group: a later attempt never reads an earlier one's."""
    return f"rljob/attempt/{attempt}/"


@dataclass(frozen=True)
class Device:
    device: torch.device
    backend: str


def choose_device(device_pref: str) -> Device:
    use_cuda = device_pref == "cuda" or (device_pref == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("runner.device=cuda but CUDA is not available")
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        return Device(device, "cpu:gloo,cuda:nccl")  # gloo for small CPU collectives, async saves
    return Device(torch.device("cpu"), "gloo")


class Gang:
    """Joins this process to one attempt's group after another."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self._hosted: dist.TCPStore | None = None  # rank 0's store, kept across its attempts

    def _store(self) -> dist.Store:
        place = self.place
        if place.rank != 0:  # a fresh client each time: the host may be a new pod
            return dist.TCPStore(place.addr, place.port, is_master=False, timeout=JOIN_TIMEOUT)
        if self._hosted is None:
            self._hosted = dist.TCPStore(
                place.addr, place.port, is_master=True, wait_for_workers=False,
                timeout=JOIN_TIMEOUT,
            )  # fmt: skip
        return self._hosted

    def join(self, attempt: int, backend: str) -> None:
        """Form attempt `attempt`'s default process group with the rest of the gang."""
        place = self.place
        store = dist.PrefixStore(attempt_prefix(attempt), self._store())
        dist.init_process_group(
            backend, store=store, rank=place.rank, world_size=place.world_size,
            timeout=JOIN_TIMEOUT,
        )  # fmt: skip
        log.info("joined attempt %d's group as rank %d of %d at %s:%d", attempt, place.rank,
                 place.world_size, place.addr, place.port)  # fmt: skip

    @staticmethod
    def leave() -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
