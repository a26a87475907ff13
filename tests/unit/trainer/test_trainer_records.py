"""metrics.jsonl and progress.json, and the stop request (SIGTERM or the request file)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rljob_contract.request import format_request
from rljob_trainer.metrics import MetricsLog, StepTiming, read_metrics, write_progress
from rljob_trainer.stop import StopRequest


def test_metrics_drop_steps_after_the_resume_step(tmp_path: Path) -> None:
    path = tmp_path / "exp" / "metrics.jsonl"
    log = MetricsLog(path, start_step=0)
    for step in range(1, 8):
        log.write({"step": step, "loss": step / 10})
    with path.open("a") as fh:
        fh.write('{"step": 8, "lo')  # torn by a SIGKILL
    log = MetricsLog(path, start_step=5)
    log.write({"step": 6, "loss": -1.0})
    entries = read_metrics(path)
    assert [e["step"] for e in entries] == [1, 2, 3, 4, 5, 6]
    assert entries[-1]["loss"] == -1.0


def test_progress_is_written_atomically(tmp_path: Path) -> None:
    timing = StepTiming()
    assert timing.mean is None
    timing.add(3.0)
    timing.add(5.0)
    write_progress(tmp_path / "ckpt", 42, attempt=3, status="running", step_seconds=timing.mean)
    progress = json.loads((tmp_path / "ckpt" / "progress.json").read_text())
    assert progress["step"] == 42 and progress["attempt"] == 3 and progress["status"] == "running"
    assert progress["step_seconds"] == 4.0
    assert {"time", "unix_time"} <= set(progress)
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["progress.json"]


@pytest.fixture
def restore_sigterm() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_request_file_must_be_non_empty(tmp_path: Path, restore_sigterm: None) -> None:
    request = tmp_path / "checkpoint-request"
    stop = StopRequest(str(request))
    assert stop.reason() is None  # not projected yet
    request.write_text("\n")
    assert stop.reason() is None  # projected, no annotation
    assert stop.noticed_at is None
    request.write_text("req-1")
    assert stop.reason() == f"checkpoint request 'req-1' in {request}"
    noticed_at = stop.noticed_at
    assert noticed_at is not None
    request.write_text("")  # the notice stands, from when it was first seen
    assert stop.reason() == f"checkpoint request 'req-1' in {request}"
    assert stop.noticed_at == noticed_at


def test_a_request_rewritten_with_an_earlier_deadline_is_taken_and_a_later_one_is_not(
    tmp_path: Path, restore_sigterm: None
) -> None:
    """A spot warning asks with no deadline; a drain with a short grace then has the operator
    write the request again, by 30 s from now, and the rank takes that. A rewrite with a later
    deadline, or an emptied file, changes nothing: the notice and its earliest deadline stand."""
    request = tmp_path / "checkpoint-request"
    stop = StopRequest(str(request))
    asked = datetime.now(UTC)
    request.write_text(format_request(asked))
    assert stop.reason() is not None and stop.node_ends_at is None
    noticed_at = stop.noticed_at

    request.write_text(format_request(asked, asked + timedelta(seconds=30)))
    stop.reason()
    sooner = stop.node_ends_at
    assert sooner is not None and 28 <= sooner - time.monotonic() <= 30  # to the second
    for later in (format_request(asked, asked + timedelta(seconds=120)), "", format_request(asked)):
        request.write_text(later)
        assert stop.reason() is not None
        assert stop.node_ends_at == sooner
    request.write_text(format_request(asked, asked + timedelta(seconds=10)))
    stop.reason()
    assert stop.node_ends_at is not None and stop.node_ends_at < sooner - 19
    assert stop.noticed_at == noticed_at


def test_sigterm_is_remembered_not_fatal(restore_sigterm: None) -> None:
    stop = StopRequest(None)
    assert stop.reason() is None
    assert stop.noticed_at is None
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.reason() == "SIGTERM"
    assert stop.noticed_at is not None
