"""Spot preemption traces, and the node pool that follows a window of one, compressed in time.

A trace (benchmarks/traces/, from the NSDI '24 paper "Can't Be Late", skypilot-org/spot-traces)
counts the live instances of a pool at every tick (5 minutes). A window of it is replayed with
each tick lasting `tick_seconds`: a drop of the count is that many nodes reclaimed at the tick's
start, each told first, as AWS tells a spot instance two minutes ahead (scaled like the ticks:
the node tainted, then gone); a rise is that many nodes back. benchmarks/spot_trace.py replays
it; this module is the pure part: which windows are worth replaying, and when what happens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from pathlib import Path

AWS_NOTICE_SECONDS = 120.0  # an AWS spot interruption notice: two minutes before the reclaim


@dataclass(frozen=True)
class Trace:
    """Live instances at every tick, one tick every `tick_seconds` (the trace's own clock)."""

    counts: tuple[int, ...]
    tick_seconds: float
    source: str  # the file it was read from


def load_trace(path: Path) -> Trace:
    """`{"metadata": {"gap_seconds": 300}, "data": [n0, n1, ...]}`, as skypilot-org/spot-traces
    publishes its traces."""
    raw = json.loads(path.read_text())
    counts = raw.get("data")
    if not isinstance(counts, list) or not all(isinstance(n, int) and n >= 0 for n in counts):
        raise ValueError(f"{path}: 'data' must be a list of live-instance counts")
    return Trace(tuple(counts), float(raw["metadata"]["gap_seconds"]), str(path))


@dataclass(frozen=True)
class Window:
    """Ticks `start` .. `start + len(counts) - 1` of a trace. Its reclaims are the drops between
    two of its ticks (a drop into the tick after the window is not in it)."""

    start: int
    counts: tuple[int, ...]

    @property
    def ticks(self) -> int:
        return len(self.counts)

    @property
    def reclaims(self) -> int:
        """Nodes reclaimed within the window: a drop from 4 to 1 is 3."""
        return sum(max(a - b, 0) for a, b in pairwise(self.counts))

    def enough_ticks(self, gang: int) -> int:
        """Ticks with at least `gang` live nodes: those in which a gang of that size can run."""
        return sum(1 for n in self.counts if n >= gang)


def window(trace: Trace, start: int, ticks: int) -> Window:
    if start < 0 or ticks < 1 or start + ticks > len(trace.counts):
        raise ValueError(
            f"ticks {start}..{start + ticks - 1} are not in {trace.source} "
            f"({len(trace.counts)} ticks)"
        )
    return Window(start, trace.counts[start : start + ticks])


def window_problems(
    w: Window, gang: int = 2, min_reclaims: int = 6, min_enough: float = 0.6
) -> list[str]:
    """What makes a window unfit to compare recoveries on: too few reclaims, or too few ticks in
    which the gang can run at all (then every system mostly waits). [] when it is fit."""
    problems = []
    if w.reclaims < min_reclaims:
        problems.append(f"{w.reclaims} reclaims, fewer than {min_reclaims}")
    if w.enough_ticks(gang) < min_enough * w.ticks:
        problems.append(
            f"{gang} or more nodes in {w.enough_ticks(gang)} of {w.ticks} ticks, fewer than "
            f"{min_enough:.0%}"
        )
    return problems


def find_windows(
    trace: Trace, ticks: int, gang: int = 2, min_reclaims: int = 6, min_enough: float = 0.6
) -> list[Window]:
    """Every fit window of `ticks` ticks, best first: most reclaims that can hit a running gang
    (drops from a count of at least `gang`), then most ticks with enough nodes, then the
    earliest."""

    def hits(w: Window) -> int:
        return sum(max(a - b, 0) for a, b in pairwise(w.counts) if a >= gang)

    fit = [
        w
        for start in range(len(trace.counts) - ticks + 1)
        if not window_problems(w := window(trace, start, ticks), gang, min_reclaims, min_enough)
    ]
    return sorted(fit, key=lambda w: (-hits(w), -w.enough_ticks(gang), w.start))


class Change(StrEnum):
    NOTICE = "notice"  # nodes told they go (tainted), `count` of them
    GONE = "gone"  # the nodes told at the same boundary are gone
    BACK = "back"  # `count` new nodes


@dataclass(frozen=True)
class NodeChange:
    at: float  # seconds from the window's start
    change: Change
    count: int
    tick: int  # the tick (within the window) that starts with the change


def notice_seconds(tick_seconds: float, trace_tick_seconds: float) -> float:
    """AWS's two minutes, scaled like the ticks."""
    return AWS_NOTICE_SECONDS * tick_seconds / trace_tick_seconds


def node_changes(w: Window, tick_seconds: float, notice: float) -> list[NodeChange]:
    """When the pool changes, in order: a drop at a tick's start is told `notice` seconds
    before it (the nodes tainted) and happens at the start (the nodes gone); a rise happens at
    the start. The pool starts with the window's first count."""
    if not 0 <= notice < tick_seconds:
        raise ValueError(f"a notice of {notice} s does not fit in a tick of {tick_seconds} s")
    changes = []
    for tick in range(1, w.ticks):
        at, delta = tick * tick_seconds, w.counts[tick] - w.counts[tick - 1]
        if delta < 0:
            changes.append(NodeChange(at - notice, Change.NOTICE, -delta, tick))
            changes.append(NodeChange(at, Change.GONE, -delta, tick))
        elif delta > 0:
            changes.append(NodeChange(at, Change.BACK, delta, tick))
    return sorted(changes, key=lambda c: c.at)
