"""Every phase, condition type, reason and Event type that rljob writes, spelled once.

They are part of the API: users match on them in `kubectl wait --for=condition=...`,
alerts and dashboards. Kubernetes' own words that rljob passes on (a DisruptionTarget
condition's reason, `Evicted`, `OOMKilled`, the scheduler's `Unschedulable`) are not
here: they are copied from the pod as the cluster wrote them.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class ConditionType(StrEnum):
    # One per phase that has one: True for the current phase, False for the others seen.
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    # True while the scheduler cannot place a pod of the gang or the inspector (no node has
    # room, a selector or affinity no node matches, a taint, a claim that is not there, a
    # queue that has not admitted it), or no scheduler has looked at one for a while.
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    # True while the kubelet cannot start a container of the gang or the inspector (a missing
    # image, a bad volume or env reference, a container that crashes before the trainer runs).
    CONTAINERS_NOT_STARTING = "ContainersNotStarting"
    # True from the third failed look at the checkpoint directory in a row.
    CHECKPOINT_LOOKUP_FAILED = "CheckpointLookupFailed"
    # RLinf, verl, TRL and OpenRLHF: False where a preemption cannot be saved on notice (the
    # job's command turns the framework's checkpoints off or keeps only one, or rljob's
    # bridge found the framework other than it expects), with why; True again once mended.
    SAVE_ON_NOTICE = "SaveOnNotice"
    # Jobs with spec.queueing.priorityBoost.enabled, while their attempt runs in a Kueue
    # queue: True while rljob writes the boost (also when clamped to the operator's limit or
    # below the next priority class up, or with a field raised to the operator's floor), False
    # while the operator allows none, the API server refuses the writes, the attempt's
    # Workload is not the job's pods', or the operator cannot list the priority classes.
    PRIORITY_BOOST = "PriorityBoost"
    # Jobs with spec.restartPolicy.inPlace, from their first recovery: True where the last
    # one kept the pods that were not lost and restarted their trainers in them, False where
    # it recreated the whole gang, with why (the launcher, a PodGroup or a Kueue queue per
    # attempt, a kubelet without container restart rules, no pod left to keep). From the
    # first gang made without rljob's restart rule, where too few nodes declare the feature:
    # False (FeatureMissing), each recovery recreating the gang.
    IN_PLACE_RESTART = "InPlaceRestart"


CONDITION_FOR_PHASE = {
    Phase.RUNNING: ConditionType.RUNNING,
    Phase.RESTARTING: ConditionType.RESTARTING,
    Phase.SUSPENDED: ConditionType.SUSPENDED,
    Phase.SUCCEEDED: ConditionType.SUCCEEDED,
    Phase.FAILED: ConditionType.FAILED,
}


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EndKind(StrEnum):
    """How an attempt ended: a disruption is not the trainer's fault, a failure is."""

    DISRUPTION = "Disruption"
    FAILURE = "Failure"


class Reason(StrEnum):
    # Reasons of the phase conditions.
    GANG_CREATED = "GangCreated"
    ALL_PODS_RUNNING = "AllPodsRunning"
    PODS_NOT_RUNNING = "PodsNotRunning"
    ALL_PODS_SUCCEEDED = "AllPodsSucceeded"
    DRIVER_SUCCEEDED = "DriverSucceeded"
    BACKOFF_AFTER_FAILURE = "BackoffAfterFailure"
    JOB_SUSPENDED = "JobSuspended"
    INVALID_SPEC = "InvalidSpec"
    INVALID_RESUME_TARGET = "InvalidResumeTarget"
    POD_REJECTED = "PodRejected"
    FOREIGN_CHILD = "ForeignChild"  # the launcher's ConfigMap or token Secret is not the job's
    DISRUPTION_BUDGET_EXHAUSTED = "DisruptionBudgetExhausted"
    FAILURE_BUDGET_EXHAUSTED = "FailureBudgetExhausted"
    CHECKPOINT_LOOKUP_FAILED = "CheckpointLookupFailed"
    # Reasons of the other conditions.
    LOOKUP_FAILED = "LookupFailed"
    LOOKUP_SUCCEEDED = "LookupSucceeded"
    PODS_SCHEDULED = "PodsScheduled"
    WAITING_FOR_KUEUE = "WaitingForKueue"
    QUEUE_INADMISSIBLE = "QueueInadmissible"  # Kueue cannot admit it: a queue that is not there
    NOT_SEEN_BY_SCHEDULER = "NotSeenByScheduler"  # no scheduler wrote PodScheduled: is it there?
    CONTAINERS_STARTED = "ContainersStarted"
    PERIODIC_SAVES_OFF = "PeriodicSavesOff"
    CHECKPOINTS_NOT_RESUMABLE = "CheckpointsNotResumable"  # weights alone (save_only_model)
    KEEPS_ONE_CHECKPOINT = "KeepsOneCheckpoint"  # its rotation deletes it before the next save
    SAVE_ON_NOTICE_UNAVAILABLE = "SaveOnNoticeUnavailable"
    SAVE_ON_NOTICE_AVAILABLE = "SaveOnNoticeAvailable"
    SAVE_ON_NOTICE_LATE = "SaveOnNoticeLate"
    BOOSTING = "Boosting"
    BOOST_CLAMPED = "BoostClamped"
    BOOST_NOT_ALLOWED = "BoostNotAllowed"
    BOOST_WRITE_REFUSED = "BoostWriteRefused"
    BOOST_WORKLOAD_NOT_OWNED = "BoostWorkloadNotOwned"  # the Workload is not the attempt's pods'
    BOOST_POLICY_RAISED = "BoostPolicyRaised"  # a field below the operator's floor: raised to it
    BOOST_CEILING_UNKNOWN = "BoostCeilingUnknown"  # the classes cannot be listed: held at 0
    PODS_KEPT = "PodsKept"  # the pods that were not lost stay, their trainers restarted in them
    GANG_RECREATED = "GangRecreated"  # in place was asked for, and could not be
    # Too few nodes take a pod with the restart rule: the gang is made as without inPlace.
    FEATURE_MISSING = "FeatureMissing"
    # Events only.
    FRESH_START = "FreshStart"
    RUNNING = "Running"
    FIRST_STEP = "FirstStep"  # an attempt finished its first step: how long its start took
    SUCCEEDED = "Succeeded"
    SUSPENDED = "Suspended"
    PREEMPTED = "Preempted"
    TRAINER_FAILED = "TrainerFailed"
    JOB_FAILED = "JobFailed"
    CHECKPOINT_REQUESTED = "CheckpointRequested"
    CHECKPOINT_MARKED_BAD = "CheckpointMarkedBad"
    # Ends of a pod that rljob names itself (status.lastEnd.reason, status.recoveries).
    POD_DELETED = "PodDeleted"
    NODE_LOST = "NodeLost"
    NODE_NOT_READY = "NodeNotReady"
    NODE_TERMINATION = "NodeTermination"
    STOPPED_BY_KUEUE = "StoppedByKueue"
    CHECKPOINTED_ON_REQUEST = "CheckpointedOnRequest"
    STOPPED_ON_NOTICE = "StoppedOnNotice"  # told to go, and stopped without a save on notice
    RETRYABLE_EXIT_CODE = "RetryableExitCode"
    EXIT_CODE = "ExitCode"
    START_ERROR = "StartError"
    POD_FAILED = "PodFailed"
    COMPLETED = "Completed"


BUDGET_EXHAUSTED = {
    EndKind.DISRUPTION: Reason.DISRUPTION_BUDGET_EXHAUSTED,
    EndKind.FAILURE: Reason.FAILURE_BUDGET_EXHAUSTED,
}
