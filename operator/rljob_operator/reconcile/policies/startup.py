"""The start of an attempt: wait out a back-off, make the gang's Secret, find where to
resume, create the gang.

An attempt is started once no pod of an earlier one runs. A launcher with a Secret (Ray's
token) has it made in a pass of its own, before the job's first gang, under a name drawn at
random, which the status records in the same write. Unless the job says `resume: never`, the
pass then asks for a look at the checkpoint directory (the caller looks and decides again),
then creates the gang resuming from what it found. A look through an inspector pod that has
not reported yet says why, where the pod is stuck.
"""

from __future__ import annotations

from ...api.reasons import EventType, Phase, Reason
from ...api.spec import JobSpec, SpecError
from ...api.status import LatestCheckpoint, ResumeFrom
from ...api.timestamps import iso, parse_iso
from ...frameworks import framework
from ...launcher import gang, ray
from ...launcher.identity import attempt_name
from ...launcher.pods import (
    Placement,
    ResumeTarget,
    desired_launcher_config_map,
    desired_network_policy,
    desired_pods,
    desired_secret,
    desired_service,
)
from ..lookup.backoff import lookup_backing_off, lookup_failed, lookup_succeeded
from ..lookup.wait import lookup_answered, lookup_pending
from ..plan import LookupPending, LookupResult, Pass
from ..pod_facts import Observed
from .goodput import retimed_at_recovery
from .in_place import rendered_spec, restart_kept
from .recovery import record_gang_creation
from .suspicion import suspect_checkpoint
from .under_way import waiting_for_the_gang


def explicit_resume(spec: JobSpec, attempt: int) -> str | None:
    """The folder spec.checkpoint.resume names, for the first attempt; every later one
    resumes from the newest complete checkpoint, which that first one went on writing."""
    wanted = spec.checkpoint.resume
    return wanted if attempt == 0 and wanted not in ("auto", "never") else None


def start_attempt(
    p: Pass, spec: JobSpec, lookup: LookupResult | LookupPending | None, seen: Observed
) -> None:
    restart_after = p.status.restart_after
    if restart_after and p.now < parse_iso(restart_after):
        p.requeue((parse_iso(restart_after) - p.now).total_seconds())
        if p.status.phase != Phase.RESTARTING:
            p.phase(
                Phase.RESTARTING, Reason.BACKOFF_AFTER_FAILURE, f"waiting until {restart_after}"
            )
        return
    if _make_gang_secret(p, spec):
        return
    resume: ResumeTarget | None = None
    if spec.checkpoint.resume != "never":
        if lookup is None:
            if not lookup_backing_off(p):
                p.plan.needs_checkpoint_lookup = True
            return
        if isinstance(lookup, LookupPending):
            lookup_pending(p, lookup)
            return
        lookup_answered(p)
        if lookup.failure is not None:
            lookup_failed(p, lookup.failure)
            return
        lookup_succeeded(p)
        if not _resume_target_accepted(p, spec, lookup):
            return
        resume = lookup.target
    _create_gang(p, spec, resume, lookup, seen)


def _make_gang_secret(p: Pass, spec: JobSpec) -> bool:
    """Whether this pass makes the launcher's Secret (the Ray token's), which the job's
    status names. Its name is random and the status records it in the write that follows its
    creation, so nobody knows it before it is taken: a Secret that someone made first under a
    name anyone could work out (the job's uid is no secret) would hand them the token. The
    gang comes in the next pass, so every pod of it mounts the one recorded name."""
    if p.status.ray_token_secret:
        return False
    name = ray.token_secret_name(p.ref, p.snap.nonce)
    secret = desired_secret(spec, p.ref, name)
    if secret is None:
        return False
    p.plan.create = [secret]  # reconcile.act: it must be made now, or it is not ours
    p.update(ray_token_secret=name)
    p.requeue(0)
    return True


def _resume_target_accepted(p: Pass, spec: JobSpec, lookup: LookupResult) -> bool:
    """Whether the lookup's answer can be resumed from: the folder the job names must be
    complete, and the newest one must not be the one the last attempt crashed on."""
    named = explicit_resume(spec, p.status.attempt)
    if named and lookup.target is None:
        p.fail(Reason.INVALID_RESUME_TARGET, f"spec.checkpoint.resume names {named}, which is "
               f"{lookup.detail}: no pod was created")  # fmt: skip
        return False
    suspect = None if named else suspect_checkpoint(p.status, lookup)
    if suspect:
        p.update(bad_checkpoints=(*p.status.bad_checkpoints, suspect))
        p.event(EventType.WARNING, Reason.CHECKPOINT_MARKED_BAD, f"{suspect.path}: "
                f"{suspect.reason}; resuming from an older one (the folder is kept)")  # fmt: skip
        p.plan.needs_checkpoint_lookup = True
        return False
    return True


def _create_gang(
    p: Pass, spec: JobSpec, resume: ResumeTarget | None, lookup: LookupResult | None,
    seen: Observed,
) -> None:  # fmt: skip
    status, attempt = p.status, p.status.attempt
    group = attempt_name(p.ref.name, attempt) if gang.wanted(spec, p.snap.workload_api) else None
    secret_name = status.ray_token_secret
    rendered = rendered_spec(p, spec, seen)  # without the restart rule where nodes lack it
    try:
        pods = desired_pods(rendered, p.ref, attempt, resume, Placement(group, p.snap.queue),
                            secret_name)  # fmt: skip
    except SpecError as exc:  # the template sets what this attempt's placement does
        p.fail(Reason.INVALID_SPEC, str(exc))
        return
    except ValueError as exc:
        p.fail(Reason.INVALID_RESUME_TARGET,
               f"cannot resume from {resume.path if resume else '-'}: {exc}")  # fmt: skip
        return
    kept = restart_kept(p, spec, seen, resume)
    # A rank with a pod already (kept, or made by a pass whose status write failed) gets none.
    taken = {k.rank for k in kept} | set(seen.current)
    pods = [pod for rank, pod in enumerate(pods) if rank not in taken]
    scheduling = gang.desired_objects(spec, p.ref, attempt) if group else []
    launcher_files = desired_launcher_config_map(spec, p.ref)
    policy = desired_network_policy(spec, p.ref)
    secret = desired_secret(spec, p.ref, secret_name) if secret_name else None
    children = [desired_service(spec, p.ref),
                *(o for o in (launcher_files, policy, secret) if o), *scheduling]  # fmt: skip
    # What outlives an attempt (c.SHARED_KINDS) is made again only where it went: a create
    # that finds it there costs a request too. The launcher's ConfigMap is read and checked by
    # every gang before its pods mount it, whatever the cache says (reconcile.act): an owner
    # reference is anyone's to copy. A Secret (the Ray token) is not watched, so that the
    # operator never reads Secrets: each gang's create of it finds it there.
    made = [obj for obj in children if obj["kind"] == "ConfigMap"
            or (obj["kind"], obj["metadata"]["name"]) not in p.snap.shared]  # fmt: skip
    p.plan.create = made + pods
    if status.pod_group and status.pod_group != group:
        p.plan.delete_pod_groups = [status.pod_group]  # the last attempt's: its pods are gone
    p.update(
        pod_group=group,
        attempt_creation_time=iso(p.now),
        attempt_first_step_time=None,
        start_time=iso(p.now) if status.start_time is None else status.start_time,
        restart_after=None,
        resume_from=ResumeFrom(resume.step, resume.path) if resume else None,
    )
    if resume:
        where = f"resuming from {resume.path} (step {resume.step})"
    else:
        where = "starting fresh"
        if spec.checkpoint.resume == "never":
            where += ": spec.checkpoint.resume is 'never'"
        elif lookup is not None:
            where += f": {lookup.detail or 'no complete checkpoint yet'}"
        p.event(EventType.NORMAL, Reason.FRESH_START, f"attempt {attempt}: {where}")
    if lookup and resume:
        latest = LatestCheckpoint(resume.step, resume.path, spec.checkpoint.layout, iso(p.now))
        p.update(latest_checkpoint=latest)
    recoveries, p.lost = record_gang_creation(status.recoveries, attempt, resume, lookup, p.now,
                                              len(kept))  # fmt: skip
    if lookup and framework(spec.framework).reports_steps:  # its framework start was counted
        p.retiming = retimed_at_recovery(p.snap.status, lookup.trained, p.now)
    p.update(recoveries=recoveries)
    if p.lost and p.lost[0] and lookup and lookup.last_finished_step is not None:
        where += (f"; lost steps: {p.lost[0]} (the last finished step was "
                  f"{lookup.last_finished_step}: the trainer did not save on notice)")  # fmt: skip
    made = f"created {len(pods)} pods" + (f", restarted {len(kept)} in place" if kept else "")
    p.event(EventType.NORMAL, Reason.GANG_CREATED, f"attempt {attempt}: {made}, {where}")
    waiting_for_the_gang(p, spec)
    p.requeue(1)
