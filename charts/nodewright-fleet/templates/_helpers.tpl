{{/* Labels on every object of the release. */}}
{{- define "nodewright-fleet.labels" -}}
app.kubernetes.io/name: nodewright-fleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nodewright
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The hub pods' selector. */}}
{{- define "nodewright-fleet.selectorLabels" -}}
app.kubernetes.io/name: nodewright-fleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: hub
{{- end }}

{{/* The hub's image: by digest when there is one. */}}
{{- define "nodewright-fleet.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end -}}
{{- end }}

{{/* The namespace of the ClusterProfiles the hub engages: the values', else the release's. */}}
{{- define "nodewright-fleet.inventoryNamespace" -}}
{{ .Values.clusterProfileNamespace | default .Release.Namespace }}
{{- end }}

{{/* Settings that cannot work together, refused with the value to change. */}}
{{- define "nodewright-fleet.validate" -}}
{{- range $k, $_ := .Values.podLabels -}}
{{- if has $k (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component") -}}
{{- fail (printf "podLabels: %s is the chart's own selector label; choose another" $k) -}}
{{- end -}}
{{- end -}}
{{- end }}
