{{/* The chart's name, or nameOverride. */}}
{{- define "rljob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: fullnameOverride; else the release name when it already holds the chart's
name; else the chart's name when that starts with the release name (release "rljob":
"rljob-operator"); else "<release>-<chart>".
*/}}
{{- define "rljob.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "rljob.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else if hasPrefix (printf "%s-" .Release.Name) $name }}
{{- $name }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Cluster-scoped objects carry the release namespace, so that releases in two namespaces never collide. */}}
{{- define "rljob.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "rljob.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rljob.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rljob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rljob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rljob.labels" -}}
helm.sh/chart: {{ include "rljob.chart" . }}
{{ include "rljob.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rljob
{{- end }}

{{- define "rljob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rljob.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The peering object's name; a ClusterKopfPeering's carries the namespace, like any cluster-scoped object. */}}
{{- define "rljob.peeringName" -}}
{{- if .Values.peering.name }}
{{- .Values.peering.name }}
{{- else if .Values.watchAllNamespaces }}
{{- include "rljob.clusterName" . }}
{{- else }}
{{- include "rljob.fullname" . }}
{{- end }}
{{- end }}

{{/* The operator image: repository, then @digest or :tag (default: the chart's appVersion). */}}
{{- define "rljob.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespaces the operator watches when it is not cluster-wide (unique, sorted). */}}
{{- define "rljob.watchNamespaces" -}}
{{- $list := .Values.watchNamespaces | default (list .Release.Namespace) }}
{{- toJson (uniq $list | sortAlpha) }}
{{- end }}

{{/* RLJOB_CHECKPOINT_VOLUMES: claim=/dir pairs. */}}
{{- define "rljob.checkpointVolumesEnv" -}}
{{- $pairs := list }}
{{- range .Values.checkpointVolumes }}
{{- $pairs = append $pairs (printf "%s=%s" .claimName .mountPath) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/*
Checks across values that values.schema.json cannot express; each fails with what to change.
*/}}
{{- define "rljob.validate" -}}
{{- if and .Values.watchAllNamespaces .Values.watchNamespaces }}
{{- fail "watchNamespaces and watchAllNamespaces: true exclude each other: set one of them" }}
{{- end }}
{{- if and (not .Values.peering.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail (printf "replicaCount: %d needs peering.enabled: true, or every replica would handle every job" (int .Values.replicaCount)) }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- if .enabled }}
{{- if and (not (kindIs "invalid" .minAvailable)) (not (kindIs "invalid" .maxUnavailable)) }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- if and (not (kindIs "invalid" .maxUnavailable)) (eq (toString .maxUnavailable) "0" "0%") }}
{{- fail "podDisruptionBudget.maxUnavailable: 0 would keep every node drain from evicting an operator pod" }}
{{- end }}
{{- if and (not (kindIs "invalid" .minAvailable)) (not (kindIs "string" .minAvailable)) }}
{{- if ge (int .minAvailable) (int $.Values.replicaCount) }}
{{- fail (printf "podDisruptionBudget.minAvailable: %d must be below replicaCount: %d, or no node drain could ever evict an operator pod" (int .minAvailable) (int $.Values.replicaCount)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.enabled (eq (int .Values.metrics.port) (int .Values.health.port)) }}
{{- fail (printf "metrics.port and health.port are both %d: give them different ports" (int .Values.health.port)) }}
{{- end }}
{{- $claims := list }}
{{- range .Values.checkpointVolumes }}
{{- if has .claimName $claims }}
{{- fail (printf "checkpointVolumes: claim %q is listed twice" .claimName) }}
{{- end }}
{{- $claims = append $claims .claimName }}
{{- end }}
{{- end }}
