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
Where a component's pods may run and how the scheduler ranks them: its nodeSelector, tolerations
and priorityClassName values, when set (none by default, as in manifests/base). Argument: the component's values (.Values.webhook or .controller).
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
{{- end }}
