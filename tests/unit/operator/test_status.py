"""The job's status as a type: it reads and writes back every field the CRD has, unchanged, so
that a pass writes only what its decisions changed."""

from __future__ import annotations

import re
from dataclasses import fields

from rljob_operator.api.status import JobStatus
from test_crd import SCHEMA

STATUS = SCHEMA["properties"]["status"]
MEANINGFUL = {"kind": "Disruption"}  # strings the type reads as an enum the CRD leaves open


def example(schema, name=""):
    """A value for every field of `schema`, of its type."""
    kind = schema.get("type")
    if kind == "object":
        return {key: example(sub, key) for key, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [example(schema["items"])]
    if "enum" in schema:
        return schema["enum"][0]
    return {"integer": 3, "number": 2.5, "boolean": True}.get(kind, MEANINGFUL.get(name, "x"))


def test_a_status_with_every_field_reads_and_writes_back_unchanged():
    full = example(STATUS)
    assert JobStatus.from_dict(full).to_dict() == full


def test_the_type_has_a_field_for_each_of_the_crds_and_no_other():
    """A field the CRD lacked would be pruned by the API server, and written again each pass."""
    names = {re.sub(r"_(\w)", lambda m: m.group(1).upper(), f.name) for f in fields(JobStatus)}
    assert names == set(STATUS["properties"])


def test_a_missing_key_reads_as_what_the_operator_starts_from():
    status = JobStatus.from_dict(None)
    assert (status.attempt, status.preemptions, status.failures, status.phase) == (0, 0, 0, None)
    assert status.to_dict() == {"attempt": 0, "preemptions": 0, "failures": 0, "conditions": []}
