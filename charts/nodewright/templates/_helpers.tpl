{{/* Labels on every object of the release. */}}
{{- define "nodewright.labels" -}}
app.kubernetes.io/name: nodewright
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nodewright
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The operator pods' selector. */}}
{{- define "nodewright.selectorLabels" -}}
app.kubernetes.io/name: nodewright
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The LINSTOR gate's pods' selector. */}}
{{- define "nodewright.linstorGateSelectorLabels" -}}
app.kubernetes.io/name: nodewright
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: linstor-gate
{{- end }}

{{/* An image reference from {repository, tag, digest}: by digest when there is one. */}}
{{- define "nodewright.image" -}}
{{- $img := index . 0 -}}{{- $root := index . 1 -}}
{{- if $img.digest -}}
{{ $img.repository }}@{{ $img.digest }}
{{- else -}}
{{ $img.repository }}:{{ $img.tag | default (printf "v%s" $root.Chart.AppVersion) }}
{{- end -}}
{{- end }}

{{/* The image of nodewright-copy: the operator's --copy-image, and the only image its Jobs may run. */}}
{{- define "nodewright.copyImage" -}}
{{ include "nodewright.image" (list .Values.copyImage .) }}
{{- end }}

{{/* The user the API server sees for the operator's ServiceAccount. */}}
{{- define "nodewright.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:nodewright-operator
{{- end }}

{{/* Annotations of the webhook configurations: cert-manager's CA injector, when it signs. */}}
{{- define "nodewright.webhookAnnotations" -}}
{{- if eq .Values.webhook.certMode "cert-manager" -}}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/nodewright-webhook
{{- end -}}
{{- end }}

{{/* Settings that cannot work together, refused with the value to change. */}}
{{- define "nodewright.validate" -}}
{{- if and .Values.audit.enabled (ne (int .Values.replicas) 1) -}}
{{- fail (printf "replicas: %v with audit.enabled: the audit trail's volume is ReadWriteOnce and only the leader holds it; set replicas: 1" .Values.replicas) -}}
{{- end -}}
{{- if and .Values.audit.enabled (not .Values.audit.keySecret) -}}
{{- fail "audit.keySecret: required with audit.enabled (a Secret whose key \"key\" is the checkpoint signing key; nodewright-audit keygen makes one)" -}}
{{- end -}}
{{- if and .Values.cluster.create .Values.cluster.profileRef (not .Values.profile.trustedKeys) -}}
{{- fail (printf "cluster.profileRef: %q needs a key to verify it with in profile.trustedKeys" .Values.cluster.profileRef) -}}
{{- end -}}
{{- $le := .Values.leaderElection -}}
{{- $lease := trimSuffix "s" $le.leaseDuration | int -}}{{- $renew := trimSuffix "s" $le.renewDeadline | int -}}{{- $retry := trimSuffix "s" $le.retryPeriod | int -}}
{{- if not (lt $renew $lease) -}}
{{- fail (printf "leaderElection.renewDeadline: %s must be shorter than leaderElection.leaseDuration (%s)" $le.renewDeadline $le.leaseDuration) -}}
{{- end -}}
{{- if not (lt $retry $renew) -}}
{{- fail (printf "leaderElection.retryPeriod: %s must be shorter than leaderElection.renewDeadline (%s)" $le.retryPeriod $le.renewDeadline) -}}
{{- end -}}
{{- /* A threshold of one unit is checked here; the operator checks any other (1s to 1h). */ -}}
{{- $stale := .Values.cluster.heartbeatStaleAfter -}}
{{- if regexMatch "^[0-9]+[smh]$" $stale -}}
{{- $n := regexFind "^[0-9]+" $stale | int -}}
{{- $secs := ternary $n (ternary (mul $n 60) (mul $n 3600) (hasSuffix "m" $stale)) (hasSuffix "s" $stale) -}}
{{- if or (lt $secs 1) (gt $secs 3600) -}}
{{- fail (printf "cluster.heartbeatStaleAfter: %s is not between 1s and 1h" $stale) -}}
{{- end -}}
{{- end -}}
{{- range $k, $_ := .Values.podLabels -}}
{{- if has $k (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component") -}}
{{- fail (printf "podLabels: %s is the chart's own selector label; choose another" $k) -}}
{{- end -}}
{{- end -}}
{{- with .Values.fleet.hubReader -}}
{{- if and .enabled (not (or .user .group .serviceAccount.name)) -}}
{{- fail "fleet.hubReader: enabled with no identity to grant; set user, group or serviceAccount.name (the fleet hub's identity on this cluster)" -}}
{{- end -}}
{{- if and .serviceAccount.create (not .serviceAccount.name) -}}
{{- fail "fleet.hubReader.serviceAccount.create: set fleet.hubReader.serviceAccount.name, the ServiceAccount to create" -}}
{{- end -}}
{{- if and .serviceAccount.create (not .enabled) -}}
{{- fail "fleet.hubReader.serviceAccount.create: set fleet.hubReader.enabled too (a ServiceAccount for the hub with nothing granted)" -}}
{{- end -}}
{{- if and .serviceAccount.create (gt (len .serviceAccount.name) 247) -}}
{{- fail "fleet.hubReader.serviceAccount.name: at most 247 characters with create (its token Secret is <name>-token)" -}}
{{- end -}}
{{- end -}}
{{- with .Values.linstor -}}
{{- if and (or .clientSecret.namespace .clientSecret.name) (not (and .clientSecret.namespace .clientSecret.name)) -}}
{{- fail "linstor.clientSecret: give both namespace and name, or neither" -}}
{{- end -}}
{{- if and .clientSecret.name (not .url) -}}
{{- fail "linstor.clientSecret: set linstor.url too (the LINSTOR gate that reads the Secret runs only with it)" -}}
{{- end -}}
{{- if and .clientSecret.name .url (not (hasPrefix "https://" .url)) -}}
{{- fail (printf "linstor.url: %s with linstor.clientSecret: a client certificate needs https" .url) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.agent.enabled (eq .Values.agent.namespace .Release.Namespace) -}}
{{- fail (printf "agent.namespace: %q is the operator's namespace; the agent's privileged namespace must be another" .Values.agent.namespace) -}}
{{- end -}}
{{- end }}
