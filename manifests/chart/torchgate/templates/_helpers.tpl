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
deleted when its entry goes). The hook records the revision that installed it
(torchgate.installedInRevisionKey), for torchgate.adoptionLoss. Where the kind is served
already, it is ordinary from the start.
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
    {{ include "torchgate.installedInRevisionKey" dict }}: {{ .root.Release.Revision | quote }}
  {{- end }}
spec:
  {{- toYaml .entry.spec | nindent 2 }}
{{- end -}}

{{/* The annotation where an install's pool object hook records the install's revision. */}}
{{- define "torchgate.installedInRevisionKey" -}}
torchgate.io/installed-in-revision
{{- end -}}

{{/*
The upgrade that adopts the install's pool objects (torchgate.poolObject) must not silently lose
what the values say. Helm 3 patches an object an upgrade adopts with the JSON merge patch of its
new manifest against that same manifest (pkg/kube createPatch: custom resources get no three-way
merge), which is empty: the adopting upgrade changes nothing in it, and later ones only what
differs from the adopting revision's manifest. The rules, for one live object of a kind (pass a
dict with "root", "kind", "key": the values key, "entries": its list, "object": the live
object, "record": the release record (Secret) of the revision named by its
torchgate.installedInRevisionKey, empty when there is none):
1. only an object that is the post-install hook of this release counts, and only on the upgrade
   that adopts it: while its installing revision is still the deployed one (the one Helm diffs
   against), or, with no record (a storage driver other than Secrets), on the revision right
   after the install;
2. its entry's spec differing from its live spec fails the upgrade, naming both specs;
3. no entry for it fails the upgrade too (Helm would leave it, outside the release).
torchgate.adoptionLosses is the shell: on an upgrade where the kind is served, it looks up every
live object of the kind and its record (`helm template` has no cluster: nothing is checked).
*/}}
{{- define "torchgate.adoptionLoss" -}}
{{- $root := .root -}}
{{- $annotations := dig "metadata" "annotations" dict .object -}}
{{- $installedIn := get $annotations (include "torchgate.installedInRevisionKey" dict) -}}
{{- if and (hasKey $annotations "helm.sh/hook") $installedIn (eq (get $annotations "meta.helm.sh/release-name") $root.Release.Name) -}}
{{- $adopting := eq (int $root.Release.Revision) (add1 (atoi $installedIn)) -}}
{{- if .record -}}
{{- $adopting = eq (dig "metadata" "labels" "status" "" .record) "deployed" -}}
{{- end -}}
{{- if $adopting -}}
{{- $name := .object.metadata.name -}}
{{- $where := printf "%s %q (%s), created by revision %s as a post-install hook, is adopted into the release by this upgrade, and Helm 3 changes nothing in an object it adopts" .kind $name .key $installedIn -}}
{{- $entries := dict -}}
{{- range .entries }}{{ $_ := set $entries .name . }}{{ end -}}
{{- if not (hasKey $entries $name) -}}
{{- fail (printf "%s: without its entry it would stay, outside the release. Keep its entry for this upgrade and remove it in the next, or delete it first (kubectl delete %s %s)" $where (lower .kind) $name) -}}
{{- end -}}
{{- $want := toJson (get $entries $name).spec -}}
{{- $have := toJson (.object.spec | default dict) -}}
{{- if ne $want $have -}}
{{- fail (printf "%s: its spec would stay %s, not become %s. Keep its entry as it is live for this upgrade and change it in the next, or apply the change first (kubectl edit %s %s)" $where $have $want (lower .kind) $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The shell of torchgate.adoptionLoss: pass a dict with "root", "kind", "key" and "entries". */}}
{{- define "torchgate.adoptionLosses" -}}
{{- $root := .root -}}
{{- if and $root.Release.IsUpgrade ($root.Capabilities.APIVersions.Has (printf "torchgate.io/v1alpha1/%s" .kind)) -}}
{{- range (dig "items" list (lookup "torchgate.io/v1alpha1" $.kind "" "")) -}}
{{- $installedIn := dig "metadata" "annotations" (include "torchgate.installedInRevisionKey" dict) "" . -}}
{{- $record := dict -}}
{{- if $installedIn -}}
{{- $record = lookup "v1" "Secret" $root.Release.Namespace (printf "sh.helm.release.v1.%s.v%s" $root.Release.Name $installedIn) -}}
{{- end -}}
{{- $_ := include "torchgate.adoptionLoss" (dict "root" $root "kind" $.kind "key" $.key "entries" $.entries "object" . "record" $record) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* `--log-level` and `--log-format` of both components, from .Values.logging. */}}
{{- define "torchgate.loggingArgs" -}}
- --log-level={{ .Values.logging.level }}
- --log-format={{ .Values.logging.format }}
{{- end -}}
