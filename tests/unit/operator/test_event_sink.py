"""Events leave the pass at once and keep their order per job."""

from __future__ import annotations

import threading

from rljob_operator.runtime.events import EventSink


def job(name: str) -> dict:
    return {"metadata": {"namespace": "ns", "name": name}}


def test_a_jobs_events_keep_their_order_and_the_caller_does_not_wait():
    release = threading.Event()
    posted: list[tuple[str, str]] = []

    def post(job, type_, reason, message):
        release.wait(5)
        posted.append((job["metadata"]["name"], reason))

    sink = EventSink(post)
    for i in range(20):
        sink(job("a"), "Normal", f"r{i}", "")
        sink(job("b"), "Normal", f"r{i}", "")
    assert posted == []  # every call returned while the posts wait
    release.set()
    sink.close()
    for name in ("a", "b"):
        assert [r for n, r in posted if n == name] == [f"r{i}" for i in range(20)]
