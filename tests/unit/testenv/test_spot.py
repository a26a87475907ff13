"""rljob_testenv.spot without a cluster: which windows of a spot trace are worth replaying, and
when the replayed pool's nodes are told, go and come back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rljob_testenv.spot import (
    Change,
    NodeChange,
    Trace,
    Window,
    find_windows,
    load_trace,
    node_changes,
    notice_seconds,
    window,
    window_problems,
)

REPO = Path(__file__).resolve().parents[3]
DEFAULT_TRACE = REPO / "benchmarks" / "traces" / "aws-4node-2023-08-03-us-east-2a_v100_1.json"


def trace(*counts: int) -> Trace:
    return Trace(counts, 300.0, "test")


@pytest.mark.parametrize(
    ("counts", "reclaims"),
    [
        ((4, 4, 4), 0),
        ((4, 3, 3, 1, 2, 0), 1 + 2 + 2),  # 4 to 1 is 3 nodes, as two drops here
        ((2, 4, 1), 3),  # a rise between two drops counts nothing
        ((0, 0, 4), 0),
    ],
)
def test_a_windows_reclaims_are_the_nodes_its_drops_take(counts, reclaims) -> None:
    assert Window(0, counts).reclaims == reclaims


def test_a_drop_into_the_tick_after_the_window_is_not_in_it() -> None:
    w = window(trace(4, 4, 4, 1), start=0, ticks=3)
    assert w.counts == (4, 4, 4) and w.reclaims == 0


def test_a_window_outside_the_trace_is_refused() -> None:
    with pytest.raises(ValueError, match="not in"):
        window(trace(4, 4), start=1, ticks=2)


def test_a_window_is_unfit_with_few_reclaims_or_few_ticks_a_gang_can_run_in() -> None:
    calm = Window(0, (4,) * 10)
    assert window_problems(calm) == ["0 reclaims, fewer than 6"]
    starved = Window(0, (4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0))
    assert starved.reclaims == 24
    assert window_problems(starved) == ["2 or more nodes in 6 of 12 ticks, fewer than 60%"]
    assert window_problems(Window(0, (4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4))) == []


def test_the_best_windows_have_the_most_reclaims_a_running_gang_can_meet() -> None:
    # From tick 6 on, the drops happen at counts of 2 and more; before, mostly from 1 to 0.
    t = trace(1, 0, 1, 0, 1, 0, 4, 3, 4, 3, 4, 3, 4, 3, 4)
    best = find_windows(t, ticks=8, min_reclaims=3, min_enough=0.5)
    assert best[0].start == 6
    assert all(not window_problems(w, 2, 3, 0.5) for w in best)


def test_the_benchmarks_default_window_is_fit() -> None:
    """benchmarks/spot_trace.py's defaults: ticks 1757-1774 of the us-east-2a trace."""
    t = load_trace(DEFAULT_TRACE)
    w = window(t, 1757, 18)
    assert t.tick_seconds == 300
    assert w.reclaims >= 6 and window_problems(w) == []
    assert w.counts == (4, 3, 3, 3, 3, 2, 2, 4, 4, 4, 4, 4, 3, 3, 3, 4, 4, 1)


def test_a_trace_that_is_not_counts_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": [4, "x"]}))
    with pytest.raises(ValueError, match="counts"):
        load_trace(bad)


def test_the_notice_is_awss_two_minutes_scaled_like_the_ticks() -> None:
    assert notice_seconds(30, 300) == 12
    assert notice_seconds(300, 300) == 120


def test_a_drop_is_told_a_notice_before_its_tick_and_happens_at_its_start() -> None:
    changes = node_changes(Window(0, (4, 3, 3, 4, 1)), tick_seconds=30, notice=12)
    assert changes == [
        NodeChange(18, Change.NOTICE, 1, 1),
        NodeChange(30, Change.GONE, 1, 1),
        NodeChange(90, Change.BACK, 1, 3),
        NodeChange(108, Change.NOTICE, 3, 4),
        NodeChange(120, Change.GONE, 3, 4),
    ]


def test_a_notice_longer_than_a_tick_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        node_changes(Window(0, (4, 3)), tick_seconds=10, notice=12)
