"""A de-duplicating delay queue of job keys, with controller-runtime's work-queue semantics.

- A key queued twice is handed out once: the passes read the newest state anyway.
- A key is never handed to two workers at once. Added while a worker has it, it is queued
  again when that worker is done, so no change is lost and no job is reconciled twice at
  the same time.
- `add_after` keeps the earliest due time per key; `retry` backs off per key, doubling,
  until `forget`.
- While paused, nothing is handed out; keys keep collecting and go out on `resume`.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

Key = Hashable


class WorkQueue:
    def __init__(
        self,
        base_backoff: float = 0.5,
        max_backoff: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._base_backoff, self._max_backoff = base_backoff, max_backoff
        self._ready: deque[Key] = deque()
        self._dirty: set[Key] = set()  # queued or to be queued again
        self._processing: set[Key] = set()
        self._due: dict[Key, float] = {}  # the earliest due time of a delayed key
        self._delayed: list[tuple[float, int, Key]] = []  # heap; stale entries are skipped
        self._sequence = 0
        self._failures: dict[Key, int] = {}
        self._paused = False
        self._shut_down = False
        self._changed = threading.Condition()

    def add(self, key: Key) -> None:
        with self._changed:
            self._add_locked(key)

    def _add_locked(self, key: Key) -> None:
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.append(key)
            self._changed.notify()

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._changed:
            due = self._clock() + delay
            if self._shut_down or self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            self._sequence += 1
            heapq.heappush(self._delayed, (due, self._sequence, key))
            self._changed.notify()

    def retry(self, key: Key) -> float:
        """Queue the key again after its back-off, which doubles with each retry; the delay."""
        with self._changed:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self._base_backoff * 2**failures, self._max_backoff)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        """The key's pass went through: its next retry starts from the base back-off."""
        with self._changed:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> Key | None:
        """The next key to work on, once one is ready and the queue runs; None on shutdown or
        when `timeout` passes first. The caller must call `done(key)` afterwards."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._changed:
            while True:
                if self._shut_down:
                    return None
                self._release_due()
                if self._ready and not self._paused:
                    key = self._ready.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                now = self._clock()
                if deadline is not None and now >= deadline:
                    return None
                waits = [] if deadline is None else [deadline - now]
                if self._delayed and not self._paused:
                    waits.append(self._delayed[0][0] - now)
                self._changed.wait(max(0.0, min(waits)) if waits else None)

    def _release_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key = heapq.heappop(self._delayed)
            if self._due.get(key) == due:
                del self._due[key]
                self._add_locked(key)

    def done(self, key: Key) -> None:
        with self._changed:
            self._processing.discard(key)
            if key in self._dirty:
                self._ready.append(key)
                self._changed.notify()

    def pause(self) -> None:
        with self._changed:
            self._paused = True

    def resume(self) -> None:
        with self._changed:
            self._paused = False
            self._changed.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    def shut_down(self) -> None:
        with self._changed:
            self._shut_down = True
            self._changed.notify_all()

    def __len__(self) -> int:
        """Keys waiting: ready now or delayed."""
        with self._changed:
            return len(self._ready) + len(self._due)
