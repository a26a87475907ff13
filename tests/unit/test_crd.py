"""The CRD file itself: a description on every field, printer columns, and its reference doc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
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


def test_every_field_has_a_description_for_kubectl_explain():
    assert undocumented(SCHEMA, "") == []


def test_printer_columns_show_phase_checkpoint_attempt_counts_the_ray_cluster_and_ettr():
    columns = [c["name"] for c in CRD["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == [
        "Phase", "Checkpoint", "Attempt", "Preemptions", "Failures", "Ray Nodes", "Driver", "ETTR",
        "Age",
    ]  # fmt: skip


def test_api_reference_is_generated_from_the_current_crd():
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen_api_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
