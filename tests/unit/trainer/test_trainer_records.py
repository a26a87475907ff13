"""metrics.jsonl and progress.json, and the stop request (SIGTERM or the request file)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
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


def test_sigterm_is_remembered_not_fatal(restore_sigterm: None) -> None:
    stop = StopRequest(None)
    assert stop.reason() is None
    assert stop.noticed_at is None
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.reason() == "SIGTERM"
    assert stop.noticed_at is not None
