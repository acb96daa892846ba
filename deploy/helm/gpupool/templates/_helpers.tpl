{{/*
The labels of a component's objects, which are also its pods' selector: one gpupool per cluster
(its CRDs, webhook and ClusterRoles are cluster-wide), so no release name is needed in them.
Flow style, so that the rendered plain manifests stay short.
*/}}
{{- define "gpupool.labels" -}}
{app.kubernetes.io/name: gpupool, app.kubernetes.io/component: {{ . }}}
{{- end }}

{{/* The one image every container runs: image.repository:image.tag (default appVersion). */}}
{{- define "gpupool.image" -}}
image: {{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end }}

{{/* The pod-level fields every Deployment's pods share. */}}
{{- define "gpupool.podCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The extender's Service name in the cluster's DNS, and the URL kube-scheduler calls. */}}
{{- define "gpupool.extenderURL" -}}
{{- .Values.scheduler.extenderURL | default (printf "http://gpupool-extender.%s.svc:%d/gpupool" .Release.Namespace (int .Values.extender.servicePort)) }}
{{- end }}

{{/* The DNS names the webhook's serving certificate covers: the apiserver dials the first. */}}
{{- define "gpupool.webhookDNSNames" -}}
- gpupool-webhook.{{ .Release.Namespace }}.svc
- gpupool-webhook.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}

{{/*
The namespaces never sent to the webhook, comma-separated: kube-system (the code always skips
it), the release namespace, webhook.skipNamespaces.
*/}}
{{- define "gpupool.webhookSkipNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) .Values.webhook.skipNamespaces | join ", " }}
{{- end }}

{{/*
The webhook's certificate when the chart makes it (webhook.certificate.source=helm): ca.crt,
tls.crt and tls.key, base64, as a dict. Made once per render and shared by the Secret and the
webhook configurations' caBundle (memoised on .Values, the one map every template sees);
on upgrade, the Secret already in the cluster is kept, so running webhooks stay trusted.
*/}}
{{- define "gpupool.webhookTLS" -}}
{{- if not (hasKey .Values "__webhookTLS") }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace "gpupool-webhook-tls" }}
{{- $tls := dict }}
{{- if and $existing (hasKey ($existing.data | default dict) "ca.crt") }}
{{- $tls = dict "ca.crt" (index $existing.data "ca.crt") "tls.crt" (index $existing.data "tls.crt") "tls.key" (index $existing.data "tls.key") }}
{{- else }}
{{- $days := int .Values.webhook.certificate.days }}
{{- $ca := genCA "gpupool-webhook-ca" $days }}
{{- $dns := list (printf "gpupool-webhook.%s.svc" .Release.Namespace) (printf "gpupool-webhook.%s.svc.cluster.local" .Release.Namespace) }}
{{- $cert := genSignedCert (first $dns) nil $dns $days $ca }}
{{- $tls = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__webhookTLS" $tls }}
{{- end }}
{{- toJson (get .Values "__webhookTLS") }}
{{- end }}

{{/* A webhook's clientConfig: the Service, the path, and the CA bundle when the chart has it. */}}
{{- define "gpupool.webhookClient" -}}
service: {namespace: {{ .ns }}, name: gpupool-webhook, port: 443, path: {{ .path }}}
{{- with .caBundle }}
caBundle: {{ . }}
{{- end }}
{{- end }}
