"""rljob_testenv.goodput_ruler without a cluster: a run's seconds to their causes, from the gangs
a watch saw and the steps their rank 0 logged, and the projection to the trace's real tick."""

from __future__ import annotations

import pytest
from rljob_testenv.goodput_ruler import Attempt, Cause, Segment, project, rule, waiting

ALWAYS_ROOM = [(0.0, 4)]


def gang(
    name: str,
    created: float,
    placed: float | None,
    running: float | None,
    ended: float | None,
    steps: dict[int, float],
    **kw,
) -> Attempt:
    return Attempt(name, created, placed, running, ended, tuple(sorted(steps.items())), **kw)


def test_one_gang_that_runs_to_the_end() -> None:
    ruling = rule(
        [gang("a0", 1, 2, 3, None, {1: 5, 2: 6, 3: 7})],
        start=0,
        end=7.5,
        capacity=ALWAYS_ROOM,
        gang=2,
    )
    assert ruling.segments == (
        Segment(0, 2, Cause.WAITING, ""),
        Segment(2, 3, Cause.POD_START, "a0"),
        Segment(3, 5, Cause.FRAMEWORK_START, "a0"),  # the first step is the framework's start
        Segment(5, 6, Cause.PRODUCTIVE, "a0"),
        Segment(6, 7, Cause.PRODUCTIVE, "a0"),
        Segment(7, 7.5, Cause.PRODUCTIVE, "a0"),  # the step in progress at the end
    )
    assert ruling.lost_steps == 0 and ruling.interruptions == ()
    assert ruling.productive == 2.5


def test_steps_after_the_newest_save_are_trained_again_with_the_step_cut_short() -> None:
    first = gang("a0", 0, 0, 0, 10, {1: 2, 2: 4, 3: 6, 4: 8}, saves=((2, 3.9),))  # killed at 10
    second = gang("a1", 11, 12, 13, None, {3: 15, 4: 16, 5: 17})
    ruling = rule([second, first], start=0, end=18, capacity=ALWAYS_ROOM, gang=2)
    seconds = ruling.seconds()
    assert ruling.lost_steps == 2  # steps 3 and 4, trained twice
    # Steps 3 and 4 of the first gang (4 s) and its step cut short (8 to 10).
    assert seconds[Cause.TRAINED_AGAIN] == 6
    assert seconds[Cause.FRAMEWORK_START] == 2 + 2
    assert seconds[Cause.PRODUCTIVE] == 2 + (1 + 1 + 1)
    assert seconds[Cause.WAITING] == 2 and seconds[Cause.POD_START] == 1
    [stop] = ruling.interruptions
    assert (stop.attempt, stop.last_step, stop.saved, stop.lost_steps) == ("a0", 4, 2, 2)
    assert stop.resumed_after == 2 and stop.longest_step == 2


def test_a_gang_cut_near_the_end_loses_its_unsaved_steps_though_none_trained_them_yet() -> None:
    first = gang("a0", 0, 0, 0, 10, {1: 2, 2: 4, 3: 6, 4: 8}, saves=((2, 3.9),))
    ruling = rule([first], start=0, end=12, capacity=[(0.0, 2), (10.0, 1)], gang=2)
    assert ruling.lost_steps == 2
    assert ruling.seconds()[Cause.TRAINED_AGAIN] == 2 + 2 + 2
    assert ruling.seconds()[Cause.WAITING_FOR_NODES] == 2
    [stop] = ruling.interruptions
    assert stop.saved == 2 and stop.resumed_after is None


def test_the_newest_save_is_any_gangs_sealed_by_the_end_and_none_sealed_later() -> None:
    first = gang("a0", 0, 0, 0, 5, {1: 1, 2: 2, 3: 3}, saves=((2, 1.9),))
    second = gang("a1", 6, 6, 6, 12, {3: 8, 4: 9, 5: 10})  # saves nothing: back to step 2
    third = gang("a2", 13, 13, 13, None, {3: 15, 4: 16}, saves=((4, 15.9),))
    ruling = rule([first, second, third], start=0, end=20, capacity=ALWAYS_ROOM, gang=2)
    assert [(i.saved, i.lost_steps) for i in ruling.interruptions] == [(2, 1), (2, 3)]
    assert ruling.lost_steps == 4


def test_a_gang_that_saved_on_notice_loses_nothing_and_its_stop_is_its_own_cause() -> None:
    first = gang("a0", 0, 0, 0, 9, {1: 2, 2: 4, 3: 8}, saves=((3, 7.9),), saved_on_notice=True,
                 noticed=5)  # fmt: skip
    second = gang("a1", 9.5, 10, 11, None, {4: 14, 5: 15})
    ruling = rule([first, second], start=0, end=15, capacity=ALWAYS_ROOM, gang=2)
    assert ruling.lost_steps == 0
    assert ruling.seconds()[Cause.STOPPING] == 1  # from step 3 (8) to the gang's end (9)
    assert ruling.seconds()[Cause.TRAINED_AGAIN] == 0
    [stop] = ruling.interruptions
    assert stop.noticed == 5 and stop.lost_steps == 0 and stop.saved == 3
    assert stop.covered(4) and not stop.covered(3.9)  # its longest step: 4 to 8


def test_waiting_is_for_nodes_only_while_fewer_take_pods_than_the_gang_needs() -> None:
    capacity = [(0.0, 3), (4.0, 1), (10.0, 2)]
    assert waiting(2, 12, capacity, gang=2) == [
        Segment(2, 4, Cause.WAITING, ""),
        Segment(4, 10, Cause.WAITING_FOR_NODES, ""),
        Segment(10, 12, Cause.WAITING, ""),
    ]


def test_a_gang_that_never_finished_a_step_was_all_framework_start() -> None:
    cut = gang("a0", 0, 1, 2, 6, {})
    ruling = rule([cut], start=0, end=8, capacity=[(0.0, 2), (6.0, 1)], gang=2)
    assert ruling.seconds()[Cause.FRAMEWORK_START] == 4
    assert ruling.seconds()[Cause.WAITING_FOR_NODES] == 2
    [stop] = ruling.interruptions
    assert stop.last_step is None and stop.longest_step is None and not stop.covered(100)


@pytest.mark.parametrize(
    "attempts",
    [
        [],
        [gang("a0", 3, None, None, None, {})],  # never placed
        [
            gang("a0", 0, 1, 2, 5, {1: 3, 2: 4}, saves=((1, 2.9),)),
            gang("a1", 4.5, 6, 7, None, {2: 9, 3: 10}),
        ],
        # overlapping gangs (a new one placed before the old one ended): counted once
        [gang("a0", 0, 1, 2, 8, {1: 3, 2: 4}), gang("a1", 5, 6, 7, None, {3: 9, 4: 10})],
        [gang("a0", 0, 1, 2, 30, {1: 3, 2: 4})],  # ends after the run
    ],
)
def test_every_second_of_the_run_goes_to_exactly_one_cause(attempts) -> None:
    ruling = rule(attempts, start=0, end=12, capacity=[(0.0, 2), (5.0, 0), (8.0, 3)], gang=2)
    assert sum(ruling.seconds().values()) == pytest.approx(12)
    ends = [s.end for s in ruling.segments]
    assert [s.start for s in ruling.segments] == [0, *ends[:-1]]  # contiguous, in order


def test_the_projection_stretches_what_the_trace_sets_and_keeps_what_a_restart_costs() -> None:
    measured = {  # 100 s: 4 ticks of 25 s, one of them with too few nodes
        Cause.PRODUCTIVE: 45.0,
        Cause.TRAINED_AGAIN: 5.0,
        Cause.WAITING_FOR_NODES: 25.0,
        Cause.WAITING: 10.0,
        Cause.POD_START: 5.0,
        Cause.FRAMEWORK_START: 10.0,
    }
    p = project(measured, tick_seconds=25, real_tick_seconds=300, ticks=4, enough_ticks=3)
    assert p.scale == 12 and p.wall == 1200 and p.enough == 900
    assert p.seconds[Cause.TRAINED_AGAIN] == 60 and p.seconds[Cause.WAITING_FOR_NODES] == 300
    assert p.seconds[Cause.WAITING] == 10 and p.seconds[Cause.FRAMEWORK_START] == 10
    # The rest trains: 12 x 45 s, and the 25 s the restarts no longer take of each 12 x.
    assert p.productive == 1200 - 60 - 300 - 10 - 5 - 10 == 12 * 45 + 11 * 25
    assert p.goodput == pytest.approx(815 / 1200)
    assert p.goodput_enough == pytest.approx(815 / 900)
