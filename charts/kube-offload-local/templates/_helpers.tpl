{{/* Names: <release>-kube-offload unless the release name already contains it. */}}
{{- define "kube-offload.fullname" -}}
{{- if contains "kube-offload" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kube-offload" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kube-offload.labels" -}}
app.kubernetes.io/name: kube-offload
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kube-offload
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "webhook"). */}}
{{- define "kube-offload.selectorLabels" -}}
app.kubernetes.io/name: kube-offload
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kube-offload.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "kube-offload.tlsSecretName" -}}
{{- .Values.certificates.secretName | default (printf "%s-tls" (include "kube-offload.fullname" .)) -}}
{{- end -}}

{{- define "kube-offload.caSecretName" -}}
{{- .Values.certificates.caSecretName | default (printf "%s-ca" (include "kube-offload.fullname" .)) -}}
{{- end -}}

{{- define "kube-offload.webhookName" -}}
{{- printf "%s-webhook" (include "kube-offload.fullname" .) -}}
{{- end -}}

{{- define "kube-offload.extenderName" -}}
{{- printf "%s-extender" (include "kube-offload.fullname" .) -}}
{{- end -}}

{{- define "kube-offload.extenderUrl" -}}
{{- printf "%s://%s.%s.svc:%d" (ternary "https" "http" .Values.extender.tls) (include "kube-offload.extenderName" .) .Release.Namespace (int .Values.extender.port) -}}
{{- end -}}

{{/* Where every container finds the serving pair (the Secret mounted whole, never with
     subPath: only whole-Secret mounts are updated in place when the pair is renewed). */}}
{{- define "kube-offload.tlsDir" -}}
/etc/kube-offload/tls
{{- end -}}

{{/* `kube-offload certs secret` with the chart's names: used by the hook Job and the
     renewal CronJob, so both issue exactly the same certificate. */}}
{{- define "kube-offload.certsSecretArgs" -}}
- certs
- secret
- --namespace={{ .Release.Namespace }}
- --name={{ include "kube-offload.tlsSecretName" . }}
- --ca-name={{ include "kube-offload.caSecretName" . }}
- --service={{ include "kube-offload.webhookName" . }}
- --service={{ include "kube-offload.extenderName" . }}
- --cluster-domain={{ .Values.certificates.clusterDomain }}
- --days={{ .Values.certificates.days }}
- --ca-days={{ .Values.certificates.caDays }}
- --within={{ .Values.certificates.renewWithin }}
{{- range .Values.certificates.extraDnsNames }}
- --dns={{ . }}
{{- end }}
{{- range .Values.certificates.extraIpAddresses }}
- --ip={{ . }}
{{- end }}
{{- end -}}

{{- define "kube-offload.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* nodeSelector, tolerations and affinity of a pod from one values section: call with
     (dict "values" .Values.<component> "indent" N). Every pod of the chart is placed by
     its own section, the hook Jobs included: a cluster whose only schedulable nodes are
     tainted (or where some nodes cannot run the image) must be able to place them all. */}}
{{- define "kube-offload.placement" -}}
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
