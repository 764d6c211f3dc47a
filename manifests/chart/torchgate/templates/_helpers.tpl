{{/*
Object names are fixed, not prefixed with the release name: the webhook configurations, the
Secret and the Lease are named in the code's flags and in the serving certificate, and
torchgate is installed once per cluster (its webhooks are cluster-wide).
*/}}

{{- define "torchgate.namespace" -}}
{{- .Values.namespace.name -}}
{{- end -}}

{{- define "torchgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels of torchgate's own objects; pass a dict with "root" (the chart context) and "component". */}}
{{- define "torchgate.labels" -}}
app.kubernetes.io/name: torchgate
app.kubernetes.io/part-of: torchgate
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{ include "torchgate.releaseLabels" .root }}
{{- end -}}

{{/* Labels that tie an object to the Helm release (the only ones on CRDs and PlacementPolicies). */}}
{{- define "torchgate.releaseLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Pod selectors: the same as the kustomize manifests, so they never change on upgrade. */}}
{{- define "torchgate.selectorLabels" -}}
app.kubernetes.io/name: torchgate
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "torchgate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "torchgate.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* `torchgate certs` arguments shared by the init container and the sidecar. */}}
{{- define "torchgate.certsArgs" -}}
- certs
- --service=torchgate-webhook
- --namespace={{ include "torchgate.namespace" . }}
- --secret={{ include "torchgate.namespace" . }}/torchgate-webhook-tls
- --webhook-config=torchgate
- --out-dir=/tls
- --dns=torchgate-controller.{{ include "torchgate.namespace" . }}.svc
{{- end -}}

{{- define "torchgate.certsResources" -}}
requests:
  cpu: 10m
  memory: 64Mi
limits:
  cpu: 200m
  memory: 256Mi
{{- end -}}

{{/*
A CRD from files/crds (copies of manifests/crds, kept equal by tests), labelled for the release
and kept on uninstall: deleting a CRD deletes every object of its kind.
*/}}
{{- define "torchgate.crd" -}}
{{- $crd := .root.Files.Get .file | fromYaml -}}
{{- if hasKey $crd "Error" -}}
{{- fail (printf "%s: %s" .file (get $crd "Error")) -}}
{{- end -}}
{{- $metadata := $crd.metadata -}}
{{- $labels := merge (include "torchgate.releaseLabels" .root | fromYaml) ($metadata.labels | default dict) -}}
{{- $_ := set $metadata "labels" $labels -}}
{{- $_ := set $metadata "annotations" (merge (dict "helm.sh/resource-policy" "keep") ($metadata.annotations | default dict)) -}}
{{- toYaml $crd -}}
{{- end -}}

{{/*
Where a component's pods may run and how the scheduler ranks them: its nodeSelector, tolerations,
priorityClassName and affinity values, when set (none by default, as in manifests/base). Argument: the component's values (.Values.webhook or .controller).
*/}}
{{- define "torchgate.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
An admin's object of one of torchgate's kinds (PlacementPolicy, TeamQuota) from a values entry
{name, spec}; pass a dict with "root", "kind" and "entry".
Helm builds every object of a release before it creates any, and cannot build one of a kind the
cluster does not serve yet: on the first install, whose CRDs are in this same release, such an
object would stop `helm install` ("no matches for kind"). There, and only there, it is a
post-install hook, created once the CRDs are, and carries the release's ownership metadata
itself, so the next `helm upgrade` adopts it as an ordinary object of the release (updated,
deleted when its entry goes; Helm 3 patches nothing in the upgrade that adopts it, which
docs/operations.md tells admins). Where the kind is served already, it is ordinary from the
start.
*/}}
{{- define "torchgate.poolObject" -}}
{{- $served := .root.Capabilities.APIVersions.Has (printf "torchgate.io/v1alpha1/%s" .kind) -}}
apiVersion: torchgate.io/v1alpha1
kind: {{ .kind }}
metadata:
  name: {{ .entry.name }}
  labels:
    {{- include "torchgate.releaseLabels" .root | nindent 4 }}
  {{- if and .root.Release.IsInstall (not $served) }}
  annotations:
    helm.sh/hook: post-install
    helm.sh/hook-delete-policy: before-hook-creation
    meta.helm.sh/release-name: {{ .root.Release.Name }}
    meta.helm.sh/release-namespace: {{ .root.Release.Namespace }}
  {{- end }}
spec:
  {{- toYaml .entry.spec | nindent 2 }}
{{- end -}}

{{/* `--log-level` and `--log-format` of both components, from .Values.logging. */}}
{{- define "torchgate.loggingArgs" -}}
- --log-level={{ .Values.logging.level }}
- --log-format={{ .Values.logging.format }}
{{- end -}}
