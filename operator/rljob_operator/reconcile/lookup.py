"""Find where the next attempt resumes: the newest complete checkpoint, and the progress lost.

Two ways, chosen per job. Where the operator can read the job's checkpoint volume
itself (RLJOB_CHECKPOINT_VOLUMES="claim=/local/dir,...": a shared filesystem it
mounts, or the node agent's directory in tests and the demo) it reads it in-process;
otherwise it runs an inspector pod and reads the answer from its termination message.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .. import constants as c
from ..api.spec import JobSpec, parse_spec
from ..checkpoints.errors import CheckpointInputError
from ..checkpoints.latest import find_latest, verify_folder
from ..checkpoints.progress import read_progress
from ..kube import Kube
from ..launcher.inspector import desired_inspector, inspector_name
from ..launcher.pods import JobRef, ResumeTarget
from .decide import LookupResult, explicit_resume

VOLUMES_ENV = "RLJOB_CHECKPOINT_VOLUMES"
INSPECTOR_IMAGE_ENV = "RLJOB_INSPECTOR_IMAGE"
DEFAULT_INSPECTOR_IMAGE = "ghcr.io/rljob/rljob-operator:0.1.0"


class LookupPending(Exception):
    """The inspector pod has not finished yet; try again shortly."""


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


def result_from_report(spec: JobSpec, report: dict[str, Any]) -> LookupResult:
    """Turn `rljob ckpt latest --json` output into a result (paths as the trainers see them)."""
    rejected = report.get("rejected") or []
    detail = "; ".join(f"step {r['step']}: {r['verdict']} ({r['reason']})" for r in rejected[:3])
    progress = report.get("progress_step")
    seconds = report.get("progress_step_seconds")
    if report.get("missing"):
        return LookupResult(None, None, f"{spec.checkpoint.path} does not exist yet")
    if not report.get("found"):
        where = spec.checkpoint.path
        detail = f"no complete checkpoint in {where}. {detail}".strip()
        return LookupResult(None, progress, detail, step_seconds=seconds)
    target = ResumeTarget(report["path"], int(report["step"]))
    return LookupResult(target, progress, detail, step_seconds=seconds)


def result_for_folder(named: str, report: dict[str, Any]) -> LookupResult:
    """Turn `rljob ckpt verify --json` output on the folder a job names into a result."""
    if report.get("verdict") != "complete":
        return LookupResult(None, detail=f"{report.get('verdict')} ({report.get('reason')})")
    return LookupResult(ResumeTarget(named, int(report["step"])))


@dataclass
class CheckpointFinder:
    kube: Kube
    volumes: dict[str, Path]
    inspector_image: str

    @classmethod
    def from_env(cls, kube: Kube) -> CheckpointFinder:
        return cls(
            kube,
            parse_volume_map(os.environ.get(VOLUMES_ENV, "")),
            os.environ.get(INSPECTOR_IMAGE_ENV, DEFAULT_INSPECTOR_IMAGE),
        )

    def local_volume(self, spec: JobSpec) -> Path | None:
        """Where the operator itself reads the job's volume, if it can."""
        claim = ((spec.checkpoint.volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
        return self.volumes.get(claim) if claim else None

    def lookup(self, job: dict[str, Any], exclude: tuple[str, ...] = ()) -> LookupResult:
        spec = parse_spec(job["spec"])
        named = explicit_resume(spec, (job.get("status") or {}).get("attempt", 0))
        root = self.local_volume(spec)
        if root is not None and named:
            return self._verify_locally(spec, root, named)
        if root is not None:
            return self._read_locally(spec, root, exclude)
        return self._ask_inspector(spec, job, exclude, named)

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
        self, spec: JobSpec, job: dict[str, Any], exclude: tuple[str, ...], named: str | None
    ) -> LookupResult:
        meta = job["metadata"]
        ref = JobRef(meta["name"], meta["namespace"], meta.get("uid", ""))
        attempt = (job.get("status") or {}).get("attempt", 0)
        name = inspector_name(ref.name, attempt)
        pod = self.kube.get_pod(ref.namespace, name)
        if pod is None:
            pod_body = desired_inspector(spec, ref, attempt, self.inspector_image, exclude, named)
            self.kube.create(pod_body)
            raise LookupPending(f"inspector pod {name} started")
        terminated = _terminated(pod)
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if terminated is None and phase in ("Succeeded", "Failed"):
            # Ended without its container ending: activeDeadlineSeconds, an eviction, ...
            self.kube.delete_pod(ref.namespace, name)
            why = pod["status"].get("reason") or phase
            raise LookupFailed(
                f"inspector pod {name} ended {why} without a report: "
                f"{(pod['status'].get('message') or '').strip()[:300]}"
            )
        if terminated is None:
            raise LookupPending(f"inspector pod {name} is {phase}")
        self.kube.delete_pod(ref.namespace, name)
        try:
            report = json.loads(terminated.get("message") or "")
        except ValueError as exc:
            raise LookupFailed(
                f"inspector pod {name} exited {terminated.get('exitCode')} without a report: "
                f"{(terminated.get('message') or '').strip()[:300]}"
            ) from exc
        return result_for_folder(named, report) if named else result_from_report(spec, report)


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return terminated
    return None


def inspector_pods_to_clean(pods: list[dict[str, Any]], attempt: int) -> list[str]:
    """Inspectors left from earlier attempts (the current one is deleted once read)."""
    return [
        p["metadata"]["name"]
        for p in pods
        if p["metadata"].get("labels", {}).get(c.LABEL_ROLE) == c.ROLE_INSPECTOR
        and p["metadata"]["labels"].get(c.LABEL_ATTEMPT) != str(attempt)
    ]
