"""In-place restart (spec.restartPolicy.inPlace, launcher.in_place): which pods of a disrupted
gang stay, and what becomes of them until they run the next attempt.

1. The attempt ends (a pod was lost): the pods that can stay are told to stop their run and
   wait (`keep_survivors`) instead of being deleted; the others go as always.
2. Until the next gang is made, a kept pod whose run has not ended holds it back as an old
   pod that still runs would; one that can no longer stay, or whose run has not ended by its
   grace period and a margin, is deleted and its rank made anew (`drop_kept`).
3. The gang is made: the kept pods get the new attempt's labels and run, which their waiting
   wrappers start, and only the other ranks get new pods (`restart_kept`).

The gang rules hold as for a recreated gang: one gang at a time (the next attempt starts only
once every old run has ended), the end is counted once, the save on notice comes first (a
kept trainer is stopped as a deleted one would be, by SIGTERM, with its grace period).

Where too few nodes take a pod with rljob's restart rule, a gang is made as without inPlace
(`rendered_spec`): such a pod would stay Pending. Its pods have no rule, so none of them can
stay (pod_facts.stays), and each recovery recreates it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ...api.reasons import ConditionType, EventType, Reason
from ...api.spec import JobSpec
from ...api.status import find_condition
from ...api.timestamps import parse_iso
from ...launcher import gang
from ...launcher.in_place import stop_patch
from ...launcher.pods import ResumeTarget, run_in_place
from ...preemption.nodes import RESTART_RULES_FEATURE
from ..plan import Pass
from ..pod_facts import Kept, Observed

# How long past its grace period a kept pod's run may take to end before the pod is dropped:
# the wrapper's own SIGKILL comes a little before the grace period's end.
KEPT_RUN_MARGIN_SECONDS = 15


def why_not_in_place(p: Pass, spec: JobSpec) -> str | None:
    """Why this job's gangs cannot be restarted in place at all; None where they can."""
    if gang.wanted(spec, p.snap.workload_api):
        return "a PodGroup places each attempt's gang as a whole"
    if p.snap.queue:
        return "Kueue admits each attempt's pods as one group"
    return None


def restart_rule_withheld(nnodes: int, in_place_nodes: int, made: bool | None) -> str | None:
    """Why a gang's new pods go without rljob's restart rule; None where they carry it.

    `made`: whether the pods the gang has already carry it (None: it has none). They decide
    for the rest, so that a gang's pods are all alike. A gang made anew carries it where at
    least one node per pod takes such a pod now (`in_place_nodes`): the scheduler places a pod
    with the rule only on a node whose kubelet declares the feature, and leaves it Pending
    where none has room. Counting a node per pod is safe: a gang that could share nodes loses
    only the in-place restart, where one that cannot would never start.
    """
    if made is not None:
        return None if made else "the gang's first pods were made without it"
    if in_place_nodes >= nnodes:
        return None
    if in_place_nodes == 0:
        return (f"no Ready node declares {RESTART_RULES_FEATURE} (kubelets before Kubernetes "
                "1.36, or rljob's node agents)")  # fmt: skip
    return (f"Ready nodes that declare {RESTART_RULES_FEATURE}: {in_place_nodes}, fewer than "
            f"the gang's {nnodes} pods")  # fmt: skip


def _feature_missing(p: Pass) -> bool:
    """Whether InPlaceRestart says that the job's gangs are made without the restart rule."""
    said = find_condition(p.status.conditions, ConditionType.IN_PLACE_RESTART)
    return said is not None and said.get("reason") == Reason.FEATURE_MISSING


def rendered_spec(p: Pass, spec: JobSpec, seen: Observed) -> JobSpec:
    """The spec a new gang's pods are rendered from: the job's, or the job's without inPlace
    (and warm) where the restart rule is withheld (restart_rule_withheld), which
    InPlaceRestart says (FeatureMissing) and, the first time, a Warning Event."""
    if not spec.restart_policy.in_place:
        return spec
    attempt, nodes = p.status.attempt, p.snap.in_place_nodes
    made = True if seen.kept else seen.restart_rule  # a kept pod has the rule
    why = restart_rule_withheld(spec.nnodes, nodes, made)
    if why is None:
        if _feature_missing(p):  # the feature came (back): the next recovery may keep pods
            p.condition(ConditionType.IN_PLACE_RESTART, False, Reason.GANG_RECREATED,
                        f"attempt {attempt}: made with rljob's restart rule again ({nodes} "
                        f"Ready nodes declare {RESTART_RULES_FEATURE})")  # fmt: skip
        return spec
    message = (f"attempt {attempt}: {why}: the gang's pods are made without rljob's restart "
               "rule, and each recovery recreates the gang")  # fmt: skip
    if not _feature_missing(p):
        p.event(EventType.WARNING, Reason.FEATURE_MISSING, message)
    p.condition(ConditionType.IN_PLACE_RESTART, False, Reason.FEATURE_MISSING, message)
    return replace(spec, restart_policy=replace(spec.restart_policy, in_place=False, warm=False))


def keep_survivors(p: Pass, spec: JobSpec, seen: Observed) -> list[str]:
    """At a disruption's end of the attempt: the pods that stay for the next one, each told
    to stop its run and wait (the plan's stop_in_place), and the InPlaceRestart condition."""
    if not spec.restart_policy.in_place:
        return []
    if seen.restart_rule is False and _feature_missing(p):
        return []  # made without the rule: InPlaceRestart says so, and that it is recreated
    why = why_not_in_place(p, spec)
    staying = {rank: s for rank, s in seen.stay.items() if s.why_not is None}
    if why is None and not staying:
        each = "; ".join(f"{s.name}: {s.why_not}" for _, s in sorted(seen.stay.items()))
        why = f"no pod can stay ({each})" if each else "no pod left"
    elif why is None and len(staying) == spec.nnodes:
        why = "no pod of the gang was lost"
    if why:
        p.condition(ConditionType.IN_PLACE_RESTART, False, Reason.GANG_RECREATED,
                    f"attempt {p.status.attempt + 1}: {why}")  # fmt: skip
        return []
    for stay in staying.values():
        p.plan.stop_in_place[stay.name] = stop_patch(p.status.attempt + 1, stay.run_restarts)
    return [stay.name for stay in staying.values()]


def drop_kept(p: Pass, spec: JobSpec, seen: Observed) -> bool:
    """Delete the kept pods that cannot run the next attempt: unfit now, or with a run that
    has not ended in time; whether there was one. Their ranks are made anew once they are
    gone."""
    end = p.status.last_end
    since = parse_iso(end.time) if end and end.time else p.now
    due = since + timedelta(seconds=spec.grace_seconds + KEPT_RUN_MARGIN_SECONDS)
    dropped = False
    for kept in seen.kept:
        if kept.unfit or (not kept.run_ended and p.now >= due):
            p.plan.delete.append(kept.name)
            dropped = True
        elif not kept.run_ended:
            p.requeue((due - p.now).total_seconds())
    return dropped


def restart_kept(p: Pass, spec: JobSpec, seen: Observed, resume: ResumeTarget | None) -> list[Kept]:
    """As the gang is made: the kept pods that run the attempt, each given its labels and
    run (the plan's run_in_place); their ranks get no new pod."""
    attempt = p.status.attempt
    kept = [k for k in seen.kept if k.run_ended and k.unfit is None]
    for k in kept:
        p.plan.run_in_place[k.name] = run_in_place(spec, p.ref, attempt, k.rank, resume, k.restarts)
    if kept:
        names = ", ".join(k.name for k in kept)
        p.condition(ConditionType.IN_PLACE_RESTART, True, Reason.PODS_KEPT,
                    f"attempt {attempt}: {names} restarted in place")  # fmt: skip
    return kept
