"""Find where the next attempt resumes: the newest complete checkpoint, and the progress lost.

Two ways, chosen per job. Where the operator can read the job's checkpoint volume
itself (RLJOB_CHECKPOINT_VOLUMES="claim=/local/dir,...": a shared filesystem it
mounts, or the node agent's directory in tests and the demo) it reads it in-process;
otherwise it runs an inspector pod and reads the answer from its termination message.
The finder only reads: the inspector pod it needs, and the removal of one that has
reported, are actions of the pass's plan (reconcile.run).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from rljob_contract.progress import trained_span

from ... import constants as c
from ...api.spec import JobSpec
from ...checkpoints.errors import CheckpointInputError
from ...checkpoints.latest import find_latest, verify_folder
from ...checkpoints.progress import read_progress
from ...launcher.identity import JobRef
from ...launcher.inspector import desired_inspector, inspector_name
from ...launcher.pods import ResumeTarget
from ..boost.pricing import Saved
from ..plan import LookupResult
from ..policies.goodput import TrainedSpan
from ..policies.startup import explicit_resume

VOLUMES_ENV = "RLJOB_CHECKPOINT_VOLUMES"
INSPECTOR_IMAGE_ENV = "RLJOB_INSPECTOR_IMAGE"
DEFAULT_INSPECTOR_IMAGE = "ghcr.io/rljob/rljob-operator:0.1.0"


@dataclass(frozen=True)
class Inspection:
    """A look through an inspector pod that has not reported yet; its events bring the job
    back. `pod`: the inspector to create, where none runs."""

    pod: dict[str, Any] | None
    state: str


class LookupFailed(Exception):
    """The checkpoint directory could not be inspected; the message says why."""


def parse_volume_map(text: str) -> dict[str, Path]:
    """'claim-a=/mnt/a,claim-b=/mnt/b' -> {claim: path}; raise ValueError on a bad entry."""
    mapping = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        claim, sep, path = entry.partition("=")
        if not sep or not claim or not path.startswith("/"):
            raise ValueError(f"{VOLUMES_ENV}: {entry!r} is not claim=/absolute/dir")
        mapping[claim] = Path(path)
    return mapping


def _trained(report: dict[str, Any]) -> TrainedSpan | None:
    """The progress record's attempt and its steps' span, where the report holds an attempt
    and two ordered positive numbers (an inspector pod's output is read as it comes)."""
    attempt, span = report.get("progress_attempt"), report.get("progress_trained")
    if not isinstance(attempt, int) or isinstance(attempt, bool):
        return None
    if not isinstance(span, list) or len(span) != 2:
        return None
    return TrainedSpan.of(attempt, trained_span(*span))


def result_from_report(spec: JobSpec, report: dict[str, Any]) -> LookupResult:
    """Turn `rljob ckpt latest --json` output into a result (paths as the trainers see them)."""
    rejected = report.get("rejected") or []
    detail = "; ".join(f"step {r['step']}: {r['verdict']} ({r['reason']})" for r in rejected[:3])
    progress = report.get("progress_step")
    seconds = report.get("progress_step_seconds")
    said = {
        "save_on_notice_unavailable": report.get("save_on_notice_unavailable"),
        "save_on_notice_late": report.get("save_on_notice_late"),
        "trained": _trained(report),
    }
    if report.get("missing"):
        return LookupResult(None, None, f"{spec.checkpoint.path} does not exist yet")
    if not report.get("found"):
        where = spec.checkpoint.path
        detail = f"no complete checkpoint in {where}. {detail}".strip()
        return LookupResult(None, progress, detail, step_seconds=seconds, **said)
    target = ResumeTarget(report["path"], int(report["step"]))
    return LookupResult(target, progress, detail, step_seconds=seconds, **said)


def result_for_folder(named: str, report: dict[str, Any]) -> LookupResult:
    """Turn `rljob ckpt verify --json` output on the folder a job names into a result."""
    if report.get("verdict") != "complete":
        return LookupResult(None, detail=f"{report.get('verdict')} ({report.get('reason')})")
    return LookupResult(ResumeTarget(named, int(report["step"])))


@dataclass
class CheckpointFinder:
    volumes: dict[str, Path]
    inspector_image: str

    @classmethod
    def from_env(cls) -> CheckpointFinder:
        return cls(
            parse_volume_map(os.environ.get(VOLUMES_ENV, "")),
            os.environ.get(INSPECTOR_IMAGE_ENV, DEFAULT_INSPECTOR_IMAGE),
        )

    def local_volume(self, spec: JobSpec) -> Path | None:
        """Where the operator itself reads the job's volume, if it can."""
        claim = ((spec.checkpoint.volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
        return self.volumes.get(claim) if claim else None

    def lookup(
        self,
        spec: JobSpec,
        ref: JobRef,
        attempt: int,
        exclude: tuple[str, ...] = (),
        inspector: dict[str, Any] | None = None,
    ) -> LookupResult | Inspection:
        """The newest complete checkpoint for `attempt` of the job (or the folder the job
        names, verified), skipping `exclude`; `inspector` is the attempt's inspector pod as
        the cache has it, if any. Raises LookupFailed when the directory cannot be read."""
        named = explicit_resume(spec, attempt)
        root = self.local_volume(spec)
        if root is not None and named:
            return self._verify_locally(spec, root, named)
        if root is not None:
            return self._read_locally(spec, root, exclude)
        return self._ask_inspector(spec, ref, attempt, exclude, named, inspector)

    def saved(self, spec: JobSpec) -> Saved | None:
        """The newest complete checkpoint (step, and its folder's time) and the trainer's
        progress, for the priority boost; None where the operator cannot read the volume
        itself (an inspector pod per look would cost more than the boost is worth) or the
        folder cannot be read."""
        root = self.local_volume(spec)
        if root is None:
            return None
        local = root / spec.checkpoint.directory if spec.checkpoint.directory else root
        if not local.is_dir():
            return Saved()
        try:
            result = find_latest(local, spec.checkpoint.layout, spec.checkpoint.verify, within=root)
            at = (
                datetime.fromtimestamp(Path(result.path).stat().st_mtime, UTC)
                if result.path
                else None
            )
        except (CheckpointInputError, OSError):
            return None
        progress = read_progress(local)
        return Saved(result.step, at, progress.step, progress.step_seconds, progress.save_seconds)

    def _verify_locally(self, spec: JobSpec, root: Path, named: str) -> LookupResult:
        local = root / PurePosixPath(named).relative_to(spec.checkpoint.mount_path)
        try:
            judged = verify_folder(
                local, spec.checkpoint.layout, spec.checkpoint.verify, within=root
            )
        except CheckpointInputError as exc:
            raise LookupFailed(f"{named} cannot be read: {exc}") from exc
        return result_for_folder(named, judged.to_dict())

    def _read_locally(self, spec: JobSpec, root: Path, exclude: tuple[str, ...]) -> LookupResult:
        local = root / spec.checkpoint.directory if spec.checkpoint.directory else root
        if not local.is_dir():
            return LookupResult(None, None, f"{spec.checkpoint.path} does not exist yet")
        skip = [local / PurePosixPath(p).relative_to(spec.checkpoint.path) for p in exclude]
        try:
            result = find_latest(
                local, spec.checkpoint.layout, spec.checkpoint.verify, exclude=skip, within=root
            )
        except CheckpointInputError as exc:
            raise LookupFailed(f"{spec.checkpoint.path}: {exc}") from exc
        report = result.to_dict()
        report.update(read_progress(local).to_report())
        if result.found:
            relative = Path(result.path).relative_to(local.resolve())
            report["path"] = f"{spec.checkpoint.path}/{relative.as_posix()}"
        return result_from_report(spec, report)

    def _ask_inspector(
        self,
        spec: JobSpec,
        ref: JobRef,
        attempt: int,
        exclude: tuple[str, ...],
        named: str | None,
        pod: dict[str, Any] | None,
    ) -> LookupResult | Inspection:
        name = inspector_name(ref.name, attempt)
        if pod is None:
            body = desired_inspector(spec, ref, attempt, self.inspector_image, exclude, named)
            return Inspection(body, f"inspector pod {name} to be created")
        terminated = _terminated(pod)
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if terminated is None and phase in c.POD_ENDED_PHASES:
            # Ended without its container ending: activeDeadlineSeconds, an eviction, ...
            why = pod["status"].get("reason") or phase
            raise LookupFailed(
                f"inspector pod {name} ended {why} without a report: "
                f"{(pod['status'].get('message') or '').strip()[:300]}"
            )
        if terminated is None:
            return Inspection(None, f"inspector pod {name} is {phase}")
        try:
            report = json.loads(terminated.get("message") or "")
        except ValueError as exc:
            raise LookupFailed(
                f"inspector pod {name} exited {terminated.get('exitCode')} without a report: "
                f"{(terminated.get('message') or '').strip()[:300]}"
            ) from exc
        return result_for_folder(named, report) if named else result_from_report(spec, report)


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for container in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return terminated
    return None


def inspector_ended(pod: dict[str, Any]) -> bool:
    """Whether an inspector pod is done: it has reported, or never will."""
    return _terminated(pod) is not None or (pod.get("status") or {}).get("phase") in (
        c.POD_ENDED_PHASES
    )
