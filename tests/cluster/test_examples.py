"""Every manifest in examples/ is accepted by the API server (server-side dry run against the
CRD), and every job in them is one the operator can render pods for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rljob_contract.steps import STEP_DIR_PREFIX
from rljob_operator import constants as c
from rljob_operator.api.spec import parse_spec
from rljob_operator.checkpoints.layouts import LAYOUTS
from rljob_operator.frameworks import framework
from rljob_operator.launcher.identity import JobRef
from rljob_operator.launcher.pods import ResumeTarget, desired_pods
from rljob_testenv import cluster

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def test_the_examples_cover_every_framework():
    jobs = [d for p in EXAMPLES for d in yaml.safe_load_all(p.read_text()) if d["kind"] == c.KIND]
    frameworks = {(j["spec"]["framework"], j["spec"].get("backend", "fsdp")) for j in jobs}
    assert {
        ("rljob", "fsdp"),
        ("rljob", "megatron"),
        ("rlinf", "fsdp"),
        ("rlinf", "megatron"),
        ("verl", "fsdp"),
        ("trl", "fsdp"),
    } <= frameworks


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_api_server_accepts_the_example(path, cluster_name, crd, namespace):
    out = cluster.kubectl(
        cluster_name, "apply", "--dry-run=server", "-n", namespace, "-f", str(path), "-o", "json"
    )
    items = json.loads(out)
    accepted = items["items"] if items.get("kind") == "List" else [items]
    kinds = [item["kind"] for item in accepted]
    assert kinds.count(c.KIND) == 1 and "PersistentVolumeClaim" in kinds, kinds

    job = next(item for item in accepted if item["kind"] == c.KIND)
    claims = {
        item["metadata"]["name"] for item in accepted if item["kind"] == "PersistentVolumeClaim"
    }
    assert job["spec"]["checkpoint"]["volume"]["persistentVolumeClaim"]["claimName"] in claims
    # What the API server defaulted is something the operator can run and resume.
    spec = parse_spec(job["spec"])
    own = framework(spec.framework).auto_layout
    prefix = LAYOUTS[own].folder_prefix if own else STEP_DIR_PREFIX
    resume = ResumeTarget(f"{spec.checkpoint.path}/{prefix}100", 100)
    pods = desired_pods(spec, JobRef(job["metadata"]["name"], namespace, "uid"), 1, resume)
    assert len(pods) == spec.nnodes
    # RLinf and verl are Ray programs: no pod of theirs runs torchrun.
    launchers = {pod["spec"]["containers"][0]["command"][0] == "torchrun" for pod in pods}
    assert launchers == {spec.launcher == "torchrun"}
