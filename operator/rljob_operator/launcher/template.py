"""Merge rljob's parts of a gang pod into the user's pod template.

The template is a full PodTemplateSpec: everything in it reaches the pod as written.
rljob owns a few parts: the pod's host name, subdomain and restart policy, its own
volumes, and in the trainer container (the one named `trainer`, or the only one) the
image, command, args, env, ports, mounts and termination message. A user's value for
one of those is refused with a SpecError naming the field, never silently replaced;
the same value rljob would set is no conflict.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import constants as c
from ..api.spec import SpecError

POD_SPEC = "spec.template.spec"
RLJOB_KEY_PREFIX = c.GROUP + "/"

# Why a trainer container's field is rljob's, and where to set it instead.
_WHY = {
    "image": "set spec.image",
    "imagePullPolicy": "set spec.imagePullPolicy",
    "command": "rljob runs spec.command under its launcher; set spec.command and spec.args",
    "args": "rljob runs spec.command under its launcher; set spec.command and spec.args",
    "resources": "set it here or in spec.resources, not in both",
    "terminationMessagePath": "rljob reads the trainer's exit reason from its own path",
    "terminationMessagePolicy": "rljob reads the trainer's exit reason from its own path",
    "readinessProbe": "rljob's probe tells when the trainer has finished a step (or the Ray "
    "head's driver runs)",
}
# The trainer container's lists, merged entry by entry: the keys that must not repeat, and
# why a clash is refused.
_CONTAINER_LISTS = {
    "env": (("name",), "rljob sets this variable"),
    "ports": (("name", "containerPort"), "rljob's launcher uses this port"),
    "volumeMounts": (("mountPath",), "rljob mounts a volume there"),
}
_POD_LISTS = {"volumes": (("name",), "the name of one of rljob's volumes")}


def trainer_index(containers: list[dict[str, Any]]) -> int | None:
    """Which of the template's containers is the trainer (None: the template has none)."""
    if not containers:
        return None
    for index, container in enumerate(containers):
        if container.get("name") == c.TRAINER_CONTAINER:
            return index
    if len(containers) == 1:
        return 0
    raise SpecError(
        f"{POD_SPEC}.containers",
        f"with more than one container, name the trainer's {c.TRAINER_CONTAINER!r}",
    )


def _merge_list(
    user: list[dict[str, Any]], ours: list[dict[str, Any]], keys: tuple[str, ...], path: str, why
) -> list[dict[str, Any]]:
    taken = {(key, entry[key]) for entry in ours for key in keys if key in entry}
    for entry in user:
        clash = next(((k, entry[k]) for k in keys if (k, entry.get(k)) in taken), None)
        if clash is not None and entry not in ours:
            raise SpecError(f"{path}[{clash[1]}]", why)
    return [*user, *(entry for entry in ours if entry not in user)]


def _merge_fields(
    user: dict[str, Any],
    ours: dict[str, Any],
    path: str,
    lists: dict[str, tuple[tuple[str, ...], str]],
    why: Callable[[str, Any], str],
) -> dict[str, Any]:
    """The user's fields, plus ours. A list named in `lists` (its entries' keys, and why a
    clash is refused) merges entry by entry; any other field of ours that the user sets to
    another value is refused with `why(key, our value)`."""
    merged = dict(user)
    for key, value in ours.items():
        if key in lists:
            keys, clash = lists[key]
            merged[key] = _merge_list(user.get(key) or [], value, keys, f"{path}.{key}", clash)
        elif key in user and user[key] != value:
            raise SpecError(f"{path}.{key}", why(key, value))
        else:
            merged[key] = value
    return merged


def merge_container(user: dict[str, Any], ours: dict[str, Any], path: str) -> dict[str, Any]:
    """The trainer container: the user's fields, plus ours; a differing value is refused."""
    return _merge_fields(
        user, ours, path, _CONTAINER_LISTS,
        lambda key, _: f"is rljob's: {_WHY.get(key, 'rljob sets it')}",
    )  # fmt: skip


def merge_pod_spec(template: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """The pod spec: the template's, with ours merged in (ours has one container)."""
    fields = {key: value for key, value in ours.items() if key != "containers"}
    merged = _merge_fields(
        copy.deepcopy(template), fields, POD_SPEC, _POD_LISTS,
        lambda _, value: f"is rljob's; rljob sets {value!r}",
    )  # fmt: skip
    (trainer,) = ours["containers"]
    containers = list(merged.get("containers") or [])
    index = trainer_index(containers)
    if index is None:
        containers, index = [{"name": c.TRAINER_CONTAINER}], 0
    user = containers[index]
    name = user.get("name") or trainer["name"]
    path = f"{POD_SPEC}.containers[{name}]"
    containers[index] = merge_container(user, {**trainer, "name": name}, path)
    merged["containers"] = containers
    return merged


def merge_metadata(template: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Labels and annotations: the template's, and ours; keys under rljob.io/ are rljob's."""
    merged = copy.deepcopy(ours)
    for kind in ("labels", "annotations"):
        for key, value in (template.get(kind) or {}).items():
            if key.startswith(RLJOB_KEY_PREFIX) or key in ours.get(kind, {}):
                raise SpecError(f"spec.template.metadata.{kind}[{key}]", "is rljob's")
            merged.setdefault(kind, {})[key] = value
    return merged
