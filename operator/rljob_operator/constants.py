"""Names the operator writes into the cluster: API coordinates, labels, annotations, volumes.

Phases, condition types and reasons are in api.reasons."""

from __future__ import annotations

GROUP = "rljob.io"
VERSION = "v1alpha1"
PLURAL = "rltrainingjobs"
KIND = "RLTrainingJob"
API_VERSION = f"{GROUP}/{VERSION}"

# The Workload API (Kubernetes 1.36, alpha), for gangs scheduled all or nothing.
SCHEDULING_GROUP = "scheduling.k8s.io"
SCHEDULING_VERSION = "v1alpha2"
SCHEDULING_PLURALS = {"Workload": "workloads", "PodGroup": "podgroups"}
# What a job owns across its attempts (its headless Service, its NetworkPolicy, its launcher
# ConfigMap, its Workload): made with the first gang, and again by a later gang only where
# the cache lacks it; the launcher ConfigMap is read and checked by every gang all the same.
SHARED_KINDS = ("Service", "ConfigMap", "NetworkPolicy", "Workload")

# Kueue: a job labeled with a LocalQueue has each attempt's pods admitted as one pod group.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
# An attempt is never retried in place, rljob makes the next one: once its pods have ended,
# Kueue finishes its workload (and frees its quota) instead of waiting for replacements.
KUEUE_RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
KUEUE_STOP_CONDITION = "TerminationTarget"  # set on a pod Kueue stops (then deletes)
# Kueue's Workload of a pod group (named as the group) says why it is not admitted yet in its
# QuotaReserved=False condition: quota, or a LocalQueue that does not exist.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_QUOTA_CONDITION = "QuotaReserved"
KUEUE_INADMISSIBLE_REASON = "Inadmissible"
# Kueue v0.19's gate UnadmittedWorkloadsObservability (beta, off by default) splits
# Inadmissible into Misconfigured (a LocalQueue or ClusterQueue that does not exist) and
# Suspended (one that is stopped): the user's to fix too.
KUEUE_INADMISSIBLE_REASONS = frozenset({KUEUE_INADMISSIBLE_REASON, "Misconfigured", "Suspended"})
KUEUE_WORKLOADS = "workloads"
# Kueue v0.17+ (feature gate PriorityBoost) adds this signed integer to the Workload's priority
# when it orders preemption candidates and its queue. rljob writes it from the work at risk
# (spec.queueing.priorityBoost), with the time of its write beside it, so that the next
# write waits its interval even after an operator restart.
KUEUE_PRIORITY_BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"
PRIORITY_BOOST_TIME_ANNOTATION = "rljob.io/priority-boost-time"
# The priority classes a Workload's priority comes from, by API group (watched, read-only, for
# the boost's ceiling below the next class up): Kueue's WorkloadPriorityClasses and the pods'
# PriorityClasses, with their versions and plurals.
POD_PRIORITY_GROUP = "scheduling.k8s.io"
PRIORITY_CLASS_KINDS = {KUEUE_GROUP: "WorkloadPriorityClass", POD_PRIORITY_GROUP: "PriorityClass"}
PRIORITY_CLASS_APIS = {
    KUEUE_GROUP: (KUEUE_VERSION, "workloadpriorityclasses"),
    POD_PRIORITY_GROUP: ("v1", "priorityclasses"),
}

# Read, not written: a node annotation with the RFC 3339 time the node goes, for whatever
# learns it from the cloud (preemption.nodes.node_termination).
NODE_TERMINATION_TIME = "rljob.io/termination-time"

# Labels on everything the operator creates.
LABEL_JOB = "rljob.io/job-name"
LABEL_ATTEMPT = "rljob.io/attempt"
LABEL_NODE_RANK = "rljob.io/node-rank"
LABEL_ROLE = "rljob.io/role"
ROLE_TRAINER = "trainer"
ROLE_INSPECTOR = "inspector"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "rljob-operator"

# Keeps a gang pod, and so the record of why it ended, until the operator has
# recorded that end in the job's status (as the Job controller's tracking finalizer).
FINALIZER = "rljob.io/track-end"

TRAINER_CONTAINER = "trainer"
CHECKPOINT_VOLUME = "checkpoints"
PODINFO_VOLUME = "rljob-podinfo"

# The pod phases in which a pod has ended (Kubernetes' own, not a job's).
POD_ENDED_PHASES = frozenset({"Succeeded", "Failed"})
# The scheduler a pod without a schedulerName goes to (Kubernetes' own default).
DEFAULT_SCHEDULER = "default-scheduler"
