"""All-or-nothing scheduling of a gang through the Kubernetes Workload API.

Plain pods are scheduled one by one: two jobs that compete for GPUs that fit one gang can
each end up holding part of theirs and wait forever for the rest. Where the API server
serves scheduling.k8s.io/v1alpha2 (Kubernetes 1.36, feature gates GenericWorkload and
GangScheduling), rljob creates a Workload for the job, holding a gang policy of
minCount = nnodes, and one PodGroup from it per attempt; each pod names its attempt's
PodGroup, and kube-scheduler binds none of them until all of them fit.
"""

from __future__ import annotations

from typing import Any

from .. import constants as c
from ..api.spec import JobSpec
from .identity import JobRef, attempt_name, labels, owner_reference

API_VERSION = f"{c.SCHEDULING_GROUP}/{c.SCHEDULING_VERSION}"
TEMPLATE = "gang"


def wanted(spec: JobSpec, workload_api: bool) -> bool:
    """Whether this job's gang goes through a PodGroup: a gang of one needs none."""
    return workload_api and spec.gang_scheduling == "Auto" and spec.nnodes > 1


def _metadata(name: str, job: JobRef) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": labels(job.name),
        "ownerReferences": [owner_reference(job)],
    }


def desired_objects(spec: JobSpec, job: JobRef, attempt: int) -> list[dict[str, Any]]:
    """The job's Workload, which holds the gang's policy, and the attempt's PodGroup made
    from it, which the attempt's pods name in spec.schedulingGroup."""
    policy = {"gang": {"minCount": spec.nnodes}}
    workload = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": _metadata(job.name, job),
        "spec": {
            "controllerRef": {"apiGroup": c.GROUP, "kind": c.KIND, "name": job.name},
            "podGroupTemplates": [{"name": TEMPLATE, "schedulingPolicy": policy}],
        },
    }
    template = {"workload": {"workloadName": job.name, "podGroupTemplateName": TEMPLATE}}
    pod_group = {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": _metadata(attempt_name(job.name, attempt), job),
        "spec": {"podGroupTemplateRef": template, "schedulingPolicy": policy},
    }
    return [workload, pod_group]
