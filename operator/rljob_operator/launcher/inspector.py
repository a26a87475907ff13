"""The inspector pod: the operator's own image reading a job's checkpoint volume, read-only.

The operator cannot mount a user's PVC, and a user's RLinf or verl image does not
carry `rljob ckpt`, so a short-lived pod of the operator's image runs
`rljob ckpt latest --json` against the volume and reports through its termination
message (Kubernetes keeps up to 4096 bytes of it; the CLI fits its JSON to that).
"""

from __future__ import annotations

from typing import Any

from .. import constants as c
from ..api.spec import JobSpec
from .identity import JobRef, labels, owner_reference

TERMINATION_LOG = "/dev/termination-log"
# Scheduling fields copied from the job, so that the inspector can reach the volume
# wherever the trainer pods could.
SCHEDULING_FIELDS = ("nodeSelector", "tolerations", "affinity", "imagePullSecrets")


def inspector_name(job: str, attempt: int) -> str:
    return f"{job}-inspect-a{attempt}"


def desired_inspector(
    spec: JobSpec,
    job: JobRef,
    attempt: int,
    image: str,
    exclude: tuple[str, ...] = (),
    named: str | None = None,
) -> dict[str, Any]:
    """`latest` over the job's directory, or `verify` of the one folder the job `named`."""
    command = [
        "rljob", "ckpt", "verify" if named else "latest", named or spec.checkpoint.path,
        "--layout", spec.checkpoint.layout,
        "--verify", spec.checkpoint.verify,
        "--within", spec.checkpoint.mount_path, "--json", "--output", TERMINATION_LOG,
    ]  # fmt: skip
    if not named:
        command.append("--missing-ok")  # a job that never saved yet has no directory yet
    for path in exclude:
        command += ["--exclude", path]
    source = spec.checkpoint.volume or {"emptyDir": {}}
    pod_labels = {**labels(job.name), c.LABEL_ROLE: c.ROLE_INSPECTOR, c.LABEL_ATTEMPT: str(attempt)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": inspector_name(job.name, attempt),
            "namespace": job.namespace,
            "labels": pod_labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            **{k: spec.template_spec[k] for k in SCHEDULING_FIELDS if k in spec.template_spec},
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 600,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "inspector",
                    "image": image,
                    "command": command,
                    "terminationMessagePolicy": "File",
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [
                        {
                            "name": c.CHECKPOINT_VOLUME,
                            "mountPath": spec.checkpoint.mount_path,
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "volumes": [{"name": c.CHECKPOINT_VOLUME, **source}],
        },
    }
