"""A look through an inspector pod that has not reported: while the pod cannot be scheduled
or started, the job says why, in the conditions and Events that the gang's stuck pods give
(reconcile.policies.stuck, naming the inspector), and in status.checkpointLookup.waiting. The
inspector's activeDeadlineSeconds counts only once it has started, so a pod that the
scheduler cannot place (a claim that is not there) would otherwise wait in silence for good.
"""

from __future__ import annotations

from dataclasses import replace

from ...api.reasons import Phase
from ...api.status import CheckpointLookup
from ...launcher.inspector import inspector_name
from ..plan import LookupPending, Pass
from ..pod_facts import Stuck
from ..policies.stuck import inspector, report_stuck


def lookup_pending(p: Pass, pending: LookupPending) -> None:
    told = report_stuck(p, pending.stuck, inspector(pending.inspector))
    last = p.status.checkpoint_lookup or CheckpointLookup()
    record = replace(last, waiting=told[1] if told else None)
    p.update(checkpoint_lookup=None if record == CheckpointLookup() else record)
    if told and not p.status.phase:
        reason, message = told
        p.phase(Phase.PENDING, reason, f"looking for a checkpoint: {message}")


def lookup_answered(p: Pass) -> None:
    """The inspector that was stuck has reported, or ended: the conditions it set turn
    False (reconcile.lookup.backoff keeps or drops the record)."""
    record = p.status.checkpoint_lookup
    if record and record.waiting:
        report_stuck(p, Stuck(), inspector(inspector_name(p.ref.name, p.status.attempt)))
