"""Rank 0's records: metrics.jsonl (one JSON object per step) and progress.json.

metrics.jsonl is appended to. A crashed attempt may have logged steps after the checkpoint the
next attempt resumes from; on start, entries with a step after the starting step are dropped
(the file is rewritten atomically), so the file always holds one entry per step, and for a
bit-exact resume the same entries an uninterrupted run would have logged (time aside).

progress.json, next to the global_step_N folders, holds the last finished step and the mean
step time of this attempt; the operator compares the step with the one it resumes from to
count lost work, and prices the lost steps with the step time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rljob_contract import progress

METRICS_FILE_NAME = "metrics.jsonl"
# The metrics an uninterrupted and a resumed run agree on exactly (time fields excluded).
EXACT_METRICS = ("loss", "reward", "accuracy", "kl", "clip_frac", "grad_norm", "lr")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every well-formed entry; a line torn by a crash is skipped."""
    entries = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("step"), int):
                entries.append(entry)
    return entries


class MetricsLog:
    def __init__(self, path: Path, start_step: int) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = [e for e in read_metrics(path) if e["step"] <= start_step]
        if path.exists():
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(json.dumps(e) + "\n" for e in kept))
            os.replace(tmp, path)

    def write(self, entry: dict[str, Any]) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")


class StepTiming:
    """The mean time of this attempt's steps (checkpoint stalls included): what a lost step
    costs to train again."""

    def __init__(self) -> None:
        self.total = 0.0
        self.steps = 0

    def add(self, seconds: float) -> float:
        self.total += seconds
        self.steps += 1
        return seconds

    @property
    def mean(self) -> float | None:
        return self.total / self.steps if self.steps else None


def write_progress(
    checkpoint_dir: Path,
    step: int,
    attempt: int | None,
    status: str,
    step_seconds: float | None = None,
    save_seconds: float | None = None,
    clock: progress.StepClock | None = None,
) -> None:
    """status: one of rljob_contract.progress's RUNNING, FINISHED, CHECKPOINTED_ON_REQUEST;
    save_seconds: a save's mean time, which tells the operator whether a save on notice fits;
    clock: when the attempt finished its first and its latest step."""
    record = progress.progress_record(
        step, attempt, status, step_seconds, save_seconds=save_seconds, clock=clock
    )
    progress.write_progress(checkpoint_dir, record)
