"""The CRD file itself: a description on every field, printer columns, and its reference doc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CRD = yaml.safe_load((REPO / "crds" / "rljob.io_rltrainingjobs.yaml").read_text())
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def undocumented(schema, path):
    missing = (
        []
        if schema.get("description") or path in ("", ".metadata", ".apiVersion", ".kind")
        else [path]
    )
    for name, sub in schema.get("properties", {}).items():
        missing += undocumented(sub, f"{path}.{name}")
    if "items" in schema:
        missing += [m for m in undocumented(schema["items"], f"{path}[]") if m != f"{path}[]"]
    return missing


POD_SPEC = ".spec.template.spec"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def explained(path):
    """rljob's own fields, and of the pod spec the pod's and each container's fields: what
    `kubectl explain` readers reach for (deeper PodSpec text is dropped to keep the CRD
    small enough for `kubectl apply`)."""
    if not path.startswith(POD_SPEC + "."):
        return True
    inner = path.removeprefix(POD_SPEC + ".").split(".")
    return len(inner) == 1 or (len(inner) == 2 and inner[0].removesuffix("[]") in CONTAINER_LISTS)


def test_every_field_has_a_description_for_kubectl_explain():
    assert [path for path in undocumented(SCHEMA, "") if explained(path)] == []


def test_the_pod_template_is_kubernetes_podspec_generated_from_the_pinned_release():
    """Every PodSpec field and a container's are there with Kubernetes' own schema."""
    pod = SCHEMA["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    container = pod["properties"]["containers"]["items"]
    for field in (
        "hostNetwork",
        "dnsPolicy",
        "initContainers",
        "runtimeClassName",
        "topologySpreadConstraints",
        "volumes",
        "schedulingGates",
        "resourceClaims",
    ):
        assert field in pod["properties"], field
    env_from = container["properties"]["env"]["items"]["properties"]["valueFrom"]
    assert "secretKeyRef" in env_from["properties"]
    limits = container["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True
    assert container["properties"]["ports"]["x-kubernetes-list-map-keys"] == [
        "containerPort", "protocol",
    ]  # fmt: skip


def test_the_crd_fits_in_the_annotation_kubectl_apply_keeps():
    """Client-side `kubectl apply` stores the whole object in one annotation (256 KiB)."""
    import json

    assert len(json.dumps(CRD, separators=(",", ":"))) < 256 * 1024


def test_printer_columns_show_phase_checkpoint_attempt_counts_the_ray_cluster_and_ettr():
    columns = [c["name"] for c in CRD["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == [
        "Phase", "Checkpoint", "Attempt", "Preemptions", "Failures", "Ray Nodes", "Driver", "ETTR",
        "Age",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "generator",
    [
        "gen_api_docs.py",  # docs/api.md from the CRD
        "gen_pod_template_schema.py",  # the CRD's PodSpec from the pinned Kubernetes release
    ],
)
def test_what_is_generated_is_up_to_date(generator):
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / generator), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
