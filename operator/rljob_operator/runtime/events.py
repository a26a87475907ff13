"""Events go out from threads of their own, once the status they describe is stored.

A pass does not wait for them: a recovery posts several, and under a burst of recoveries
those writes would hold up the passes that create the new gangs. A job's Events keep their
order (one lane per job, chosen by its name). An Event lost to a crash of the operator is
lost, as with Kubernetes' own event recorders; the status has it all.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..kube import KubeError

log = logging.getLogger(__name__)

PostEvent = Callable[[dict[str, Any], str, str, str], None]  # job, type, reason, message

LANES = 4  # threads posting Events, each in order for the jobs it holds


class EventSink:
    def __init__(self, post: PostEvent, lanes: int = LANES) -> None:
        self._post = post
        self._lanes = [
            ThreadPoolExecutor(1, thread_name_prefix=f"rljob-events-{i}") for i in range(lanes)
        ]

    def __call__(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = job["metadata"]
        which = zlib.crc32(f"{meta['namespace']}/{meta['name']}".encode()) % len(self._lanes)
        self._lanes[which].submit(self._send, job, type_, reason, message)

    def _send(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            self._post(job, type_, reason, message)
        except KubeError as exc:
            log.warning("event %s of %s not posted: %s", reason, job["metadata"]["name"], exc)

    def close(self) -> None:
        """Post what is queued, then stop."""
        for lane in self._lanes:
            lane.shutdown(wait=True)
