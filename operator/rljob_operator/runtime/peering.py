"""Whether this replica acts, read from kopf's peering objects.

kopf coordinates the replicas: each writes a keep-alive (priority, lifetime, last seen)
into a peering object, and kopf pauses its own handlers while a live peer has a higher
or the same priority. kopf does not tell its handlers when it pauses, and the work queue
must stop with it, so this module watches the same objects and applies kopf's rule
(`acts`) to them: a kopf handler on the peering objects would itself be paused by that
rule, and miss the very event that pauses it. The queue does not depend on kopf's handlers
stopping: a replica that does not act hands out no work, whatever events reach it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client, watch

from ..api.timestamps import parse_iso

log = logging.getLogger(__name__)

GROUP, VERSION = "kopf.dev", "v1"
REEVALUATE_SECONDS = 1.0  # a peer's keep-alive runs out without any event saying so


def _parse(stamp: str | None) -> datetime | None:
    try:
        return parse_iso(str(stamp))
    except ValueError:
        return None


def acts(peers: dict[str, Any], identity: str, priority: int, now: datetime) -> bool:
    """kopf's rule: act unless another live peer has a higher or the same priority. A peer
    is live until its last keep-alive is `lifetime` seconds old."""
    for peer_id, peer in (peers or {}).items():
        if peer_id == identity or not isinstance(peer, dict):
            continue
        try:
            seen = _parse(peer.get("lastseen"))
            lifetime = timedelta(seconds=int(peer.get("lifetime", 60)))
            rank = int(peer.get("priority", 0))
        except (TypeError, ValueError):
            continue  # not a keep-alive kopf wrote
        if seen is not None and now < seen + lifetime and rank >= priority:
            return False
    return True


class PeeringWatch:
    """Watches the peering objects (one per watched namespace, or the cluster's) and calls
    `on_change(acting)` whenever the answer of `acts` over all of them changes."""

    def __init__(
        self,
        api: client.ApiClient,
        name: str,
        namespaces: list[str] | None,  # None: the ClusterKopfPeering
        identity: str,
        priority: int,
        on_change: Callable[[bool], None],
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.name, self.identity, self.priority = name, identity, priority
        self.on_change = on_change
        self.scopes = namespaces if namespaces is not None else [None]
        self.peers: dict[str | None, dict[str, Any]] = {scope: {} for scope in self.scopes}
        self.acting: bool | None = None
        self.seen: set[str | None] = set()  # the scopes read at least once
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def start(self) -> None:
        for scope in self.scopes:
            threading.Thread(
                target=self._watch, args=(scope,), name=f"rljob-peering-{scope}", daemon=True
            ).start()
        threading.Thread(target=self._tick, name="rljob-peering-tick", daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()

    def evaluate(self, now: datetime | None = None) -> None:
        moment = now or datetime.now(UTC)
        with self.lock:
            if len(self.seen) < len(self.scopes):
                return  # not known yet: stay as we are (paused at the start)
            acting = all(
                acts(peers, self.identity, self.priority, moment) for peers in self.peers.values()
            )
            if acting == self.acting:
                return
            self.acting = acting
        self.on_change(acting)

    def _tick(self) -> None:
        while not self.stopping.wait(REEVALUATE_SECONDS):
            self.evaluate()

    def _watch(self, scope: str | None) -> None:
        """Read the object, then follow it from there; again after any error."""
        while not self.stopping.is_set():
            try:
                revision = self._read(scope)
                for event in watch.Watch().stream(
                    *self._list_call(scope),
                    field_selector=f"metadata.name={self.name}",
                    resource_version=revision,
                    timeout_seconds=300,
                ):
                    gone = event["type"] == "DELETED"
                    self._take(scope, {} if gone else (event["object"] or {}).get("status"))
            except client.ApiException as exc:  # a 410, a 403: read and watch again
                log.warning(
                    "peering watch of %s: %s %s; watching again",
                    scope or "cluster", exc.status, exc.reason,
                )  # fmt: skip
                self.stopping.wait(2)
            except Exception as exc:  # the API server went away: read and watch again
                log.info("peering watch of %s: %s; watching again", scope or "cluster", exc)
                self.stopping.wait(2)

    def _list_call(self, scope: str | None) -> tuple:
        if scope is None:
            return self.custom.list_cluster_custom_object, GROUP, VERSION, "clusterkopfpeerings"
        return self.custom.list_namespaced_custom_object, GROUP, VERSION, scope, "kopfpeerings"

    def _read(self, scope: str | None) -> str:
        """Take the object as it is now (a list of one, by name: the RBAC that kopf's own
        watch needs); the list's resourceVersion, to watch from."""
        call, *args = self._list_call(scope)
        listed = call(*args, field_selector=f"metadata.name={self.name}")
        items = listed.get("items") or []
        self._take(scope, items[0].get("status") if items else {})
        return listed["metadata"]["resourceVersion"]

    def _take(self, scope: str | None, peers: dict[str, Any] | None) -> None:
        with self.lock:
            self.peers[scope] = dict(peers or {})
            self.seen.add(scope)
        self.evaluate()
