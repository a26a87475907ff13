"""Who can reach a gang: its NetworkPolicy, which every launcher makes (launcher.launchers).

A gang's ports run what they are sent: a Ray head's dashboard and GCS take jobs; torchrun's
c10d store takes anyone's keys, and gloo and NCCL listen on ports of their own choosing without
authentication (gloo's object collectives unpickle what they receive). So every job's pods admit
ingress, on every port, from the job's own pods alone. Egress is left alone: the pods still
reach DNS, storage and the internet. Kubernetes lets a node reach its pods whatever the policy
says (probes), and `kubectl port-forward` enters the pod from inside it. NetworkPolicies add
up: a user admits a client of their own with one of theirs.
"""

from __future__ import annotations

from typing import Any

from .. import constants as c


def gang_network_policy(
    job: str, namespace: str, metadata: dict[str, Any], launcher: str
) -> dict[str, Any]:
    """`<job>-<launcher>-gang`: selects every pod of the job (its trainers, and the inspector
    pods, which listen on nothing), and admits ingress from those pods alone."""
    own = {"matchLabels": {c.LABEL_JOB: job, c.LABEL_MANAGED_BY: c.MANAGED_BY}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{job}-{launcher}-gang", "namespace": namespace, **metadata},
        "spec": {
            "podSelector": own,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": own}]}],
        },
    }
