"""Find the newest complete checkpoint of a job, where the operator can read its volume.

The operator reads a job's checkpoint directory itself when its volume is mapped
to a local directory (RLJOB_CHECKPOINT_VOLUMES="claim=/local/dir,..."): a shared
filesystem the operator mounts, or the node agent's shared directory in tests and
the demo. Paths are translated between the trainer containers' view and ours.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .api.spec import parse_spec
from .checkpoints.latest import find_latest
from .launcher.pods import ResumeTarget

log = logging.getLogger(__name__)
VOLUMES_ENV = "RLJOB_CHECKPOINT_VOLUMES"


def parse_volume_map(text: str) -> dict[str, Path]:
    """'claim-a=/mnt/a,claim-b=/mnt/b' -> {claim: path}; raise ValueError on a bad entry."""
    mapping = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        claim, sep, path = entry.partition("=")
        if not sep or not claim or not path.startswith("/"):
            raise ValueError(f"{VOLUMES_ENV}: {entry!r} is not claim=/absolute/dir")
        mapping[claim] = Path(path)
    return mapping


@dataclass(frozen=True)
class LocalVolumeLocator:
    volumes: dict[str, Path]

    def local_dir(self, job: dict[str, Any]) -> Path | None:
        spec = parse_spec(job["spec"])
        claim = ((spec.checkpoint.volume or {}).get("persistentVolumeClaim") or {}).get("claimName")
        root = self.volumes.get(claim) if claim else None
        if root is None:
            return None
        return root / spec.checkpoint.directory if spec.checkpoint.directory else root

    def latest(self, job: dict[str, Any]) -> ResumeTarget | None:
        spec = parse_spec(job["spec"])
        local = self.local_dir(job)
        if local is None:
            log.warning(
                "%s/%s: its checkpoint volume is not readable by the operator; starting fresh",
                job["metadata"]["namespace"],
                job["metadata"]["name"],
            )
            return None
        if not local.is_dir():
            return None
        result = find_latest(local, layout=spec.checkpoint.layout, verify=spec.checkpoint.verify)
        if not result.found:
            return None
        relative = Path(result.path).resolve().relative_to(local.resolve())
        return ResumeTarget(f"{spec.checkpoint.path}/{relative.as_posix()}", result.step)


def locator_from_env() -> LocalVolumeLocator:
    return LocalVolumeLocator(parse_volume_map(os.environ.get(VOLUMES_ENV, "")))
