"""Write docs/api.md from the CRD's schema, so that the reference never drifts from the API.

.venv/bin/python hack/gen_api_docs.py          # rewrite docs/api.md
.venv/bin/python hack/gen_api_docs.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from gen_pod_template_schema import RLJOB_FIELDS

REPO = Path(__file__).resolve().parent.parent
CRD = REPO / "crds" / "rljob.io_rltrainingjobs.yaml"
OUT = REPO / "docs" / "api.md"

HEADER = """# RLTrainingJob API reference (rljob.io/v1alpha1)

Generated from `crds/rljob.io_rltrainingjobs.yaml` by `hack/gen_api_docs.py`; do not edit by hand.
`kubectl explain rltj.spec.<field>` shows the same text.

Short name `rltj`. Columns of `kubectl get rltj`: {columns}.
"""


def type_of(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = schema.get("type", "object")
    if kind == "array":
        return f"[]{type_of(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map[string]{type_of(schema['additionalProperties'])}"
    return kind


def constraints(schema: dict[str, Any]) -> str:
    parts = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if "default" in schema and schema["default"] != {}:
        parts.append(f"default `{schema['default']}`")
    for key, label in (("minimum", "min"), ("maximum", "max"), ("maxItems", "max items")):
        if key in schema:
            parts.append(f"{label} {schema[key]}")
    if "pattern" in schema:
        parts.append(f"pattern `{schema['pattern']}`")
    return "; ".join(parts)


POD_SPEC = "spec.template.spec"


def rows(schema: dict[str, Any], path: str, required: set[str]) -> list[str]:
    """One row per field. Of the pod spec, only the fields where rljob differs from a pod:
    the rest is Kubernetes' PodSpec as it stands, which `kubectl explain` shows."""
    lines = []
    for name, sub in schema.get("properties", {}).items():
        field = f"{path}.{name}"
        if path == POD_SPEC and name not in RLJOB_FIELDS:
            continue
        if path.startswith(POD_SPEC + "."):
            continue
        description = " ".join(sub.get("description", "").split())
        flag = " (required)" if name in required else ""
        lines.append(
            f"| `{field}`{flag} | {type_of(sub)} | {description} | {constraints(sub)} |".replace(
                " |  |", " | |"
            )
        )
        nested = sub.get("items", sub) if sub.get("type") == "array" else sub
        if "properties" in nested:
            lines += rows(nested, field + ("[]" if sub.get("type") == "array" else ""),
                          set(nested.get("required", [])))  # fmt: skip
    return lines


def rules(schema: dict[str, Any], path: str = "") -> list[str]:
    """Each CEL rule's message, after the field it is about unless the message names it."""
    found = []
    for rule in schema.get("x-kubernetes-validations", []):
        field, message = path + rule.get("fieldPath", ""), rule["message"]
        named = message.startswith(("spec.", "metadata.")) or not field
        found.append(f"- {message}" if named else f"- `{field}`: {message}")
    for name, sub in schema.get("properties", {}).items():
        found += rules(sub, f"{path}.{name}" if path else name)
    return found


def render() -> str:
    crd = yaml.safe_load(CRD.read_text())
    version = crd["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    columns = ", ".join(c["name"].upper() for c in version["additionalPrinterColumns"])
    out = [HEADER.format(columns=columns), " ".join(root["description"].split()), ""]
    for section in ("spec", "status"):
        schema = root["properties"][section]
        out += [f"## {section}", "", " ".join(schema["description"].split()), ""]
        out += ["| field | type | description | constraints |", "| --- | --- | --- | --- |"]
        out += rows(schema, section, set(schema.get("required", [])))
        out.append("")
    out += [
        "## Validation rules",
        "",
        "Besides types, enums and ranges, the API server checks:",
        "",
    ]
    out += [*rules(root), ""]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    text = render()
    if parser.parse_args().check:
        if OUT.read_text() != text:
            print("docs/api.md is out of date: run hack/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
