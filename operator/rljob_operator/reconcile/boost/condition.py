"""The PriorityBoost condition of a job that wants a boost: which bound or guard applies, in
words the job's author and the cluster's administrator can act on."""

from __future__ import annotations

from ...api.reasons import Reason
from ...api.spec import PriorityBoostSpec
from ...api.timestamps import iso_precise
from ..settings import Settings
from .bounds import allowed, raised
from .guards import Ceiling
from .memory import Refusal


def boost_condition(
    policy: PriorityBoostSpec,
    settings: Settings,
    refusal: Refusal | None,
    top: Ceiling | None = None,
    foreign: str | None = None,
    classes_unknown: str | None = None,
) -> tuple[bool, Reason, str]:
    """The PriorityBoost condition of a job that wants a boost: (status, reason, message).
    `top`: the ceiling below the next class up; `foreign`: why the attempt's Workload is not
    the job's (boost.guards); `classes_unknown`: why the operator does not know the
    cluster's priority classes. A field of the job's that a floor raised is said in every
    message but BoostNotAllowed's."""
    limit = settings.max_priority_boost
    if limit <= 0:
        return (False, Reason.BOOST_NOT_ALLOWED,
                "the operator allows no priority boost (its --max-priority-boost is 0; the "
                "chart's kueue.priorityBoost and kueue.maxPriorityBoost set it)")  # fmt: skip
    status, reason, message = _boost_state(policy, settings, refusal, top, foreign,
                                           classes_unknown)  # fmt: skip
    note = raised(policy, settings)
    if note is None:
        return status, reason, message
    if reason == Reason.BOOSTING:
        reason = Reason.BOOST_POLICY_RAISED
    return status, reason, f"{message}; {note}"


def _boost_state(
    policy: PriorityBoostSpec,
    settings: Settings,
    refusal: Refusal | None,
    top: Ceiling | None,
    foreign: str | None,
    classes_unknown: str | None,
) -> tuple[bool, Reason, str]:
    limit = settings.max_priority_boost
    if foreign is not None:
        return (False, Reason.BOOST_WORKLOAD_NOT_OWNED,
                f"the Kueue Workload under the attempt's name is not the job's pod group "
                f"({foreign}): rljob writes no priority boost on it")  # fmt: skip
    if refusal is not None:
        return (False, Reason.BOOST_WRITE_REFUSED,
                f"the API server refused the priority boost on the attempt's Workload "
                f"{refusal.count} time(s) in a row ({refusal.why}); the next try is at "
                f"{iso_precise(refusal.retry_at())}. The operator needs patch on "
                "workloads.kueue.x-k8s.io (the chart's kueue.priorityBoost: true)")  # fmt: skip
    if classes_unknown is not None:
        return (False, Reason.BOOST_CEILING_UNKNOWN,
                f"the operator cannot list the cluster's priority classes ({classes_unknown}), "
                "so it cannot keep the boost below the next class above the job's: the boost "
                "is held at 0 until a list succeeds (the operator lists them at its start and "
                "every 10 minutes). It needs list and watch on priorityclasses.scheduling.k8s.io "
                "and workloadpriorityclasses.kueue.x-k8s.io, which the chart grants")  # fmt: skip
    unclassed = allowed(policy, settings).max_boost
    if top is not None and top.boost < unclassed:
        return (True, Reason.BOOST_CLAMPED,
                f"the boost goes up to {top.boost}, {top.describe()}: Kueue preempts the job "
                "for a higher class only while the job's priority plus boost is below "
                "it")  # fmt: skip
    if policy.max_boost is not None and policy.max_boost > limit:
        return (True, Reason.BOOST_CLAMPED,
                f"spec.queueing.priorityBoost.maxBoost {policy.max_boost} is above the "
                f"operator's limit: the boost goes up to {limit}")  # fmt: skip
    return (
        True,
        Reason.BOOSTING,
        f"the boost follows the work at risk, up to {allowed(policy, settings, top).max_boost}",
    )
