{{/*
The operator's permissions, derived from its code (docs/install.md explains each rule).
"rljob.rules.jobs": what it does to jobs and their pods, in every namespace it watches.
*/}}
{{- define "rljob.rules.jobs" -}}
# Jobs: kopf lists and watches them; the reconcile reads one (get); a finished job whose
# ttlSecondsAfterFinished ran out is deleted. Nothing writes to a job but its status.
- apiGroups: [rljob.io]
  resources: [rltrainingjobs]
  verbs: [get, list, watch, delete]
# Every reconcile pass writes the job's status.
- apiGroups: [rljob.io]
  resources: [rltrainingjobs/status]
  verbs: [patch]
# The pods and the Service name the job as their owner with blockOwnerDeletion: true, which
# clusters with the OwnerReferencesPermissionEnforcement admission plugin (OpenShift) allow
# only to whoever may update the owner's finalizers. The operator never sets a job finalizer.
- apiGroups: [rljob.io]
  resources: [rltrainingjobs/finalizers]
  verbs: [update]
# The gang's pods and the inspector pods: created, read, listed and watched (kopf), annotated
# (checkpoint requests) and released from rljob's finalizer (patch), deleted at an attempt's end.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
# The gang's headless Service (rendezvous) and, for Ray and TRL jobs, the immutable ConfigMap
# of the launcher files its pods mount; the garbage collector removes them with the job.
# Listed and watched (rljob's own, by label), so that a later gang makes them again only where
# they went. The launcher's ConfigMap is read before every gang that mounts it, to refuse one
# that is not the job's own (its controller, rljob's files, immutable).
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [list, watch, create]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
# Ray gangs: an immutable Secret per job with its Ray token, under a random name, never read.
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
# Every gang: a NetworkPolicy per job that admits the gang's ports from its own pods only.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create]
# All-or-nothing gangs where the cluster serves the Workload API: a Workload per job (listed
# and watched, as the Service) and a PodGroup per attempt (the garbage collector removes them
# with the job); the last attempt's PodGroup is deleted when the next one starts.
- apiGroups: [scheduling.k8s.io]
  resources: [workloads]
  verbs: [list, watch, create]
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups]
  verbs: [create]
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups]
  verbs: [delete]
# Kueue, where it is installed: its Workloads say why a queued gang is not admitted yet (no
# quota, a LocalQueue that does not exist), for the job's PodsUnschedulable condition. Read-only.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [list, watch]
{{- if (.Values.kueue).priorityBoost }}
# With kueue.priorityBoost: the priority boost (the annotation kueue.x-k8s.io/priority-boost)
# of the running attempt's Workload, for jobs with spec.queueing.priorityBoost.enabled.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [patch]
{{- end }}
# Events on the job (Preempted, GangCreated, ...).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* Peering in one namespace: kopf lists and watches the peering objects, and patches its own. */}}
{{- define "rljob.rules.peering" -}}
{{- if .root.Values.peering.enabled -}}
# Peering: kopf watches the peering objects of the namespace and writes its keep-alive into
# the release's own one.
- apiGroups: [kopf.dev]
  resources: [{{ .resource }}]
  verbs: [list, watch]
- apiGroups: [kopf.dev]
  resources: [{{ .resource }}]
  resourceNames: [{{ include "rljob.peeringName" .root | quote }}]
  verbs: [patch]
{{- end }}
{{- end }}

{{/* Cluster-scoped reads, needed in either mode. */}}
{{- define "rljob.rules.cluster" -}}
# Nodes are cluster-scoped: the operator watches them, so that a node that goes NotReady
# or away wakes the jobs with pods there (lost, NotReady, tainted for termination).
# Read-only.
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
# kopf watches the CRDs, so that it starts serving RLTrainingJobs when the CRD appears or changes.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
# Priority classes are cluster-scoped: the operator watches their values, so that a job's
# priority boost never lifts it to the next class above its own (Kueue's
# WorkloadPriorityClasses, where Kueue is installed, and the pods' PriorityClasses). Read-only.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloadpriorityclasses]
  verbs: [list, watch]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [list, watch]
{{- end }}
