"""kwok stages that end pods as a kubelet does, for a cluster that compares controllers.

kwokctl's default stages complete every pod a Job owns as soon as it runs, and remove a
deleted pod at once. On such a cluster a Job's `podFailurePolicy` never sees a failed pod,
so JobSet's preemption recipe cannot be measured. These stages instead:
- keep a running pod running, whoever owns it;
- turn a pod that is being deleted Failed, every container terminated with exit 143 (what
  SIGTERM gives), as a kubelet reports it;
- then remove it, as the kubelet does once it has reported the end.

The node stages and the pod-ready stage are kwok's own, read from the kwok module that
`binaries` builds kwok from (the Go module cache), so they match the kwok that runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from . import binaries

KWOK = next(c for c in binaries.COMPONENTS if c.name == "kwok")
KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)

TERMINATED_BY_SIGTERM = """\
{{ $now := Now }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: 143
      reason: Error
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: Failed
"""


def pod_stop_stage() -> dict[str, Any]:
    """A pod being deleted that has not ended: Failed, its containers ended by SIGTERM."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-stop-on-delete"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                {"key": ".status.phase", "operator": "NotIn", "values": ["Succeeded", "Failed"]},
            ]},
            "next": {"statusTemplate": TERMINATED_BY_SIGTERM},
        },
    }  # fmt: skip


def only_ended(stage: dict[str, Any]) -> dict[str, Any]:
    """kwok's pod-delete stage, narrowed to pods that have ended (the kubelet's order)."""
    expressions = stage["spec"]["selector"]["matchExpressions"]
    ended = {"key": ".status.phase", "operator": "In", "values": ["Succeeded", "Failed"]}
    return {**stage, "spec": {**stage["spec"], "selector": {"matchExpressions": [
        *expressions, ended]}}}  # fmt: skip


def kubelet_like_stages(kwok_source: Path) -> list[dict[str, Any]]:
    stages = [yaml.safe_load((kwok_source / f).read_text()) for f in KWOK_STAGE_FILES]
    return [only_ended(s) if s["metadata"]["name"] == "pod-delete" else s for s in stages] + [
        pod_stop_stage()
    ]


def write_config(path: Path) -> Path:
    """The kwokctl --config file holding these stages (they replace kwokctl's defaults)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(kubelet_like_stages(binaries.module_source(KWOK))))
    return path
