"""One reconcile pass for one job key: observe, decide, act.

`Reconciler.observe` gathers everything the pass reads into one Snapshot: the job and its
spec (parsed and checked once per metadata.generation), its pods by role, their nodes (from
the watch cache; one the cache lacks is read, never taken for gone), what the job owns,
Kueue's admission and what the priority boost reads (the checkpoint folder at most once per
policy interval and attempt). Taking it writes nothing: what the pass read for the passes
after it (the nodes the cache lacked, the folder's read) `Reconciler.keep` keeps once it is
taken. `decide` (reconcile.decide) is pure. The one other read is the checkpoint lookup a
decision asks for (reconcile.lookup), after which the pass decides again, a bounded number of
times. `act` (reconcile.act.apply) alone writes to the cluster.

As controller-runtime's Reconcile(ctx, Request) reads one cache, the pass reads the cache the
watches fill (runtime.cache) and calls the API server only to act. What passes keep for the
ones after them (the checked specs, the boost's memory) is the Reconciler's own: the cache
holds only what the watches deliver, and the operator's own writes ahead of them.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from .. import constants as c
from ..api.reasons import Reason
from ..api.spec import JobSpec, SpecError
from ..api.status import JobStatus
from ..kube import Kube, KubeError, at_once
from ..launcher.inspector import inspector_name
from ..runtime.cache import ClusterCache, JobView, Key
from ..runtime.events import PostEvent
from .act import ForeignChild, apply
from .boost.gate import BoostReads
from .boost.memory import BoostMemory
from .decide import decide, fail
from .lookup.finder import CheckpointFinder, Inspection, LookupFailed, inspector_ended
from .plan import LookupPending, LookupResult, Plan
from .pod_facts import inspector_stuck
from .policies.pod_cleanup import holds_our_finalizer
from .settings import DEFAULT_SETTINGS, Settings
from .snapshot import Setup, Snapshot, checked_spec, job_ref, take_snapshot

log = logging.getLogger(__name__)


class Reconciler:
    """Runs passes; the caller never runs two passes of one job at once (the work queue hands
    a key to one worker at a time). `settings` are the administrator's. What a pass keeps for
    the next (the checked specs, the boost's memory) is forgotten once a pass finds the job
    gone or going."""

    def __init__(
        self, kube: Kube, cache: ClusterCache, finder: CheckpointFinder, tell: PostEvent,
        settings: Settings = DEFAULT_SETTINGS,
    ) -> None:  # fmt: skip
        self.kube, self.cache, self.finder, self.tell = kube, cache, finder, tell
        self.settings = settings
        # Each job's checked spec, with the uid and generation it was checked at.
        self._specs: dict[Key, tuple[str, int, JobSpec | SpecError]] = {}
        self.boost_memory = BoostMemory()
        self.boost_reads = BoostReads(self.boost_memory, finder)

    def reconcile(
        self, namespace: str, name: str, now: datetime | None = None
    ) -> tuple[JobStatus, Plan] | None:
        """One pass, named as controller-runtime names it; its Events go to `tell`. The job's
        status as the pass found it, and the plan it carried out (whose status is now
        stored); None for a job that is gone."""
        view = self.cache.view(namespace, name)
        job = view.job
        if job is None or job["metadata"].get("deletionTimestamp"):
            self._specs.pop((namespace, name), None)
            self.boost_memory.forget(namespace, name)
            self._release(namespace, view.pods)
            return None
        read = self.kube.get_nodes(missing) if (missing := _missing(view.nodes)) else {}
        snap = self.observe(replace(view, nodes={**view.nodes, **read}), now or datetime.now(UTC))
        self.keep(snap, read)
        plan = plan_pass(snap, self.finder)
        self.act(snap, plan)
        return snap.status, plan

    def observe(self, view: JobView, now: datetime) -> Snapshot:
        """The snapshot of a view whose job exists, its trainers' nodes all read (None: gone).
        Taking it writes nothing: the pass's writes are `act`'s, and what it read for the
        passes after it, `keep`'s."""
        setup = Setup(self.settings, self.kube.serves_workload_api, self.boost_reads)
        return take_snapshot(view, now, setup, self.checked_spec(view.job))

    def keep(self, snap: Snapshot, nodes: dict[str, dict[str, Any] | None]) -> None:
        """Keep what the pass read beside the cache for the passes after it: the `nodes` it
        read from the API server (those the cache lacked: a node is never taken for gone only
        because its watch event has not come yet) go into the cache, as the pass's own writes
        do; the checkpoint folder's read for the boost, into the boost's memory."""
        for node in nodes.values():
            if node is not None:
                self.cache.on_node(None, node)
        self.boost_reads.keep(snap.ref, snap.boost)

    def act(self, snap: Snapshot, plan: Plan) -> None:
        """Carry the plan out; a plan the API server refuses for good becomes the job's
        failure, said once."""
        try:
            apply(self.kube, self.cache, self.boost_memory, snap.job, plan, self.tell)
        except ForeignChild as exc:
            apply(self.kube, self.cache, self.boost_memory, snap.job,
                  fail(snap, Reason.FOREIGN_CHILD, str(exc)), self.tell)  # fmt: skip
        except KubeError as exc:
            refused = exc.status in (400, 422) or exc.refused_by_admission
            if not refused or not plan.create:
                raise
            # The API server refused a pod we rendered: retrying cannot help.
            why = f"the API server refused the job's pods: {exc}"
            apply(self.kube, self.cache, self.boost_memory, snap.job,
                  fail(snap, Reason.POD_REJECTED, why), self.tell)  # fmt: skip

    def checked_spec(self, job: dict[str, Any]) -> JobSpec | SpecError:
        """The job's spec as `snapshot.checked_spec` returns it, kept per uid and generation:
        the API server moves metadata.generation on every change of the spec."""
        meta = job["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        uid, generation = meta.get("uid", ""), meta.get("generation")
        kept = self._specs.get(key)
        if kept is not None and generation is not None and kept[:2] == (uid, generation):
            return kept[2]
        spec = checked_spec(job, job_ref(job))
        if generation is not None:
            self._specs[key] = (uid, generation, spec)
        return spec

    def _release(self, namespace: str, pods: list[dict[str, Any]]) -> None:
        """A job that is gone or going: drop our finalizer from its pods, which the garbage
        collector then removes."""
        held = [pod["metadata"]["name"] for pod in pods if holds_our_finalizer(pod)]
        for pod in at_once(partial(self.kube.release_pod, namespace, name) for name in held):
            if pod:  # the next pass must not release it again
                self.cache.on_pod(None, pod)


def _missing(nodes: dict[str, dict[str, Any] | None]) -> set[str]:
    """The nodes a view names that the cache lacks."""
    return {name for name, node in nodes.items() if node is None}


MAX_LOOKUPS_PER_PASS = 3  # a bad checkpoint asks for one more look


def plan_pass(snap: Snapshot, finder: CheckpointFinder) -> Plan:
    """Decide, looking at the checkpoints as often as the decision asks (bounded).

    An inspector pod the look needs is created by the plan, and one that is done (it
    reported, or never will) or of another attempt is deleted by it, after the status that
    records its report. One that runs and has not reported is decided on once more, for what
    keeps it from starting.
    """
    plan = decide(snap)
    inspectors = snap.inspectors
    inspector = inspectors.get(inspector_name(snap.ref.name, plan.status.attempt))
    events = []
    for _ in range(MAX_LOOKUPS_PER_PASS):
        if not plan.needs_checkpoint_lookup or isinstance(snap.spec, SpecError):
            break
        seen = snap.with_status(plan.status)
        try:
            found = finder.lookup(
                snap.spec, snap.ref, plan.status.attempt, plan.lookup_exclude, inspector
            )
        except LookupFailed as exc:
            found = LookupResult(None, failure=str(exc))
        if isinstance(found, Inspection):
            log.debug("%s: %s", snap.ref.name, found.state)
            if found.pod is None and inspector is not None:  # it runs, and has not reported
                stuck = inspector_stuck(inspector, snap.now)
                waiting = LookupPending(inspector["metadata"]["name"], stuck)
                events += plan.events  # replaced by the plan that knows why it waits
                plan = decide(seen, waiting)
            elif found.pod is not None and found.pod["metadata"]["name"] not in inspectors:
                plan.create.append(found.pod)
            # else the one read this pass is still there: the plan deletes it, and its
            # deletion brings the pass that creates the next.
            break
        inspector = None  # its report is read: a second look needs a new one
        events += plan.events  # this plan is replaced by the one that knows what was found
        plan = decide(seen, found)
    plan.events = events + plan.events
    attempt = str(plan.status.attempt)
    plan.delete += [
        name for name, pod in inspectors.items()
        if not pod["metadata"].get("deletionTimestamp")
        and (inspector_ended(pod) or pod["metadata"]["labels"].get(c.LABEL_ATTEMPT) != attempt)
    ]  # fmt: skip
    return plan
