"""kopf handlers: thin doors into the one reconcile.

The job's own events, its pods' events and a timer all lead to the same
idempotent pass; none of them decides anything itself.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes import client, config

from . import constants as c
from .kube import Kube, KubeError
from .reconcile.run import reconcile
from .resume_lookup import locator_from_env

log = logging.getLogger(__name__)
RECONCILE_INTERVAL_SECONDS = 5.0

_state: dict[str, Any] = {}


def _kube() -> Kube:
    if "kube" not in _state:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        _state["kube"] = Kube(client.ApiClient())
        _state["locator"] = locator_from_env()
    return _state["kube"]


def _reconcile(namespace: str, name: str) -> None:
    kube = _kube()
    try:
        plan = reconcile(kube, namespace, name, _state["locator"])
    except KubeError as exc:
        if exc.status == 403:
            raise kopf.PermanentError(f"rljob lacks a permission it needs: {exc}") from exc
        raise kopf.TemporaryError(str(exc), delay=2) from exc
    if plan and plan.events:
        for event in plan.events:
            log.info("%s/%s %s: %s", namespace, name, event.reason, event.message)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # The CRD's status is structural: keep kopf's own bookkeeping in annotations.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="rljob.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="rljob.io", key="last-handled-configuration"
    )
    settings.posting.enabled = False  # we post our own, richer events
    settings.watching.server_timeout = 300
    _kube()
    log.info("rljob operator started")


@kopf.on.resume(c.GROUP, c.VERSION, c.PLURAL)
@kopf.on.create(c.GROUP, c.VERSION, c.PLURAL)
@kopf.on.update(c.GROUP, c.VERSION, c.PLURAL, field="spec")
def job_changed(namespace: str, name: str, **_: Any) -> None:
    _reconcile(namespace, name)


@kopf.timer(c.GROUP, c.VERSION, c.PLURAL, interval=RECONCILE_INTERVAL_SECONDS)
def job_timer(namespace: str, name: str, **_: Any) -> None:
    _reconcile(namespace, name)


@kopf.on.event(
    "", "v1", "pods", labels={c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_JOB: kopf.PRESENT}
)
def pod_changed(namespace: str, labels: dict[str, str], **_: Any) -> None:
    _reconcile(namespace, labels[c.LABEL_JOB])
