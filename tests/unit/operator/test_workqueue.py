"""The work queue: de-duplication, one worker per key, delays, back-off, pause."""

from __future__ import annotations

import threading

from rljob_operator.runtime.queue import WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def drain(queue: WorkQueue) -> list:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_a_key_added_many_times_is_handed_out_once_in_order_of_first_add():
    queue = WorkQueue()
    for key in ["a", "b", "a", "c", "b"]:
        queue.add(key)
    assert len(queue) == 3
    assert drain(queue) == ["a", "b", "c"]


def test_a_key_added_while_a_worker_has_it_waits_for_done_then_comes_once():
    queue = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("a")
    assert queue.get(timeout=0) is None  # not to a second worker while the first has it
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_add_after_keeps_the_earliest_due_time_and_an_add_comes_at_once():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add_after("a", 10)
    queue.add_after("a", 3)
    queue.add_after("a", 20)
    queue.add_after("b", 5)
    assert queue.get(timeout=0) is None
    clock.now += 3
    assert drain(queue) == ["a"]
    clock.now += 2
    assert drain(queue) == ["b"]
    clock.now += 100
    assert drain(queue) == []  # the later due times of "a" were dropped
    queue.add_after("c", 0)
    assert drain(queue) == ["c"]


def test_retry_doubles_the_delay_up_to_the_cap_and_forget_starts_over():
    clock = Clock()
    queue = WorkQueue(base_backoff=1, max_backoff=5, clock=clock)
    assert [queue.retry("a") for _ in range(5)] == [1, 2, 4, 5, 5]
    queue.forget("a")
    assert queue.retry("a") == 1


def test_paused_hands_out_nothing_and_resume_releases_what_collected():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.pause()
    queue.add("a")
    queue.add_after("b", 1)
    clock.now += 2
    assert queue.get(timeout=0) is None
    queue.resume()
    assert sorted(drain(queue)) == ["a", "b"]


def test_a_blocked_get_wakes_on_add_and_returns_none_on_shutdown():
    queue = WorkQueue()
    got = []
    worker = threading.Thread(target=lambda: got.append(queue.get(timeout=10)))
    worker.start()
    queue.add("a")
    worker.join(5)
    assert got == ["a"]
    worker = threading.Thread(target=lambda: got.append(queue.get(timeout=10)))
    worker.start()
    queue.shut_down()
    worker.join(5)
    assert got == ["a", None] and not worker.is_alive()


def test_a_delayed_key_wakes_a_blocked_get_in_real_time():
    queue = WorkQueue()
    queue.add_after("a", 0.05)
    assert queue.get(timeout=5) == "a"
