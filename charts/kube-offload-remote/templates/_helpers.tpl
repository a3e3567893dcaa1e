{{- define "kube-offload-remote.fullname" -}}
{{- if contains "kube-offload" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kube-offload" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kube-offload-remote.labels" -}}
app.kubernetes.io/name: kube-offload
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kube-offload
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kube-offload-remote.selectorLabels" -}}
app.kubernetes.io/name: kube-offload
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kube-offload-remote.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "kube-offload-remote.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "kube-offload-remote.enforcerName" -}}
{{- printf "%s-enforcer" (include "kube-offload-remote.fullname" .) -}}
{{- end -}}

{{- /* The ClusterRole the enforcer binds into every twin namespace for its consumer. */ -}}
{{- define "kube-offload-remote.twinRoleName" -}}
{{- printf "%s-consumer-twin" (include "kube-offload-remote.fullname" .) -}}
{{- end -}}

{{- define "kube-offload-remote.tlsSecretName" -}}
{{- printf "%s-enforcer-tls" (include "kube-offload-remote.fullname" .) -}}
{{- end -}}

{{- define "kube-offload-remote.caSecretName" -}}
{{- printf "%s-enforcer-ca" (include "kube-offload-remote.fullname" .) -}}
{{- end -}}

{{- define "kube-offload-remote.tlsDir" -}}
/etc/kube-offload/tls
{{- end -}}

{{- define "kube-offload-remote.certsSecretArgs" -}}
- certs
- secret
- --namespace={{ .Release.Namespace }}
- --name={{ include "kube-offload-remote.tlsSecretName" . }}
- --ca-name={{ include "kube-offload-remote.caSecretName" . }}
- --service={{ include "kube-offload-remote.enforcerName" . }}
- --cluster-domain={{ .Values.certificates.clusterDomain }}
- --days={{ .Values.certificates.days }}
- --ca-days={{ .Values.certificates.caDays }}
- --within={{ .Values.certificates.renewWithin }}
{{- end -}}

{{/* nodeSelector, tolerations and affinity of a pod from one values section: call with
     (dict "values" .Values.<component> "indent" N). Every pod of the chart is placed by
     its own section, the hook Jobs included: a cluster whose only schedulable nodes are
     tainted (or where some nodes cannot run the image) must be able to place them all. */}}
{{- define "kube-offload-remote.placement" -}}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
