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

{{/*
The URL kube-scheduler calls: scheduler.extenderURL, or the extender Service's cluster DNS name
(https unless extender.tls.enabled=false).
*/}}
{{- define "gpupool.extenderURL" -}}
{{- $scheme := ternary "https" "http" .Values.extender.tls.enabled }}
{{- .Values.scheduler.extenderURL | default (printf "%s://gpupool-extender.%s.svc:%d/gpupool" $scheme .Release.Namespace (int .Values.extender.servicePort)) }}
{{- end }}

{{/*
The names the extender's serving certificate covers, as JSON {"dns": [...], "ips": [...]}: the
Service's DNS names, the host of scheduler.extenderURL (an address or a name: kube-scheduler
checks the certificate against the URL it dials), extender.tls.extraDNSNames and extraIPs.
*/}}
{{- define "gpupool.extenderSANs" -}}
{{- $ns := .Release.Namespace }}
{{- $dns := list (printf "gpupool-extender.%s.svc" $ns) (printf "gpupool-extender.%s.svc.cluster.local" $ns) (printf "gpupool-extender.%s" $ns) }}
{{- $ips := list }}
{{- with .Values.scheduler.extenderURL }}
{{- $host := (urlParse .).hostname }}
{{- if regexMatch "^[0-9.]+$|:" $host }}
{{- $ips = append $ips $host }}
{{- else }}
{{- $dns = append $dns $host }}
{{- end }}
{{- end }}
{{- toJson (dict "dns" (concat $dns .Values.extender.tls.extraDNSNames | uniq) "ips" (concat $ips .Values.extender.tls.extraIPs | uniq)) }}
{{- end }}

{{/*
The extender's certificates when the chart makes them (extender.tls.source=helm), base64, as a
dict: ca.crt, ca.key (a CA of its own), tls.crt and tls.key (the serving pair, CN
gpupool-extender; sprig gives it the server and client usages, so a standby forwards binds to
the leader with it), client.crt and client.key (kube-scheduler's pair, CN
extender.tls.schedulerClientName). Memoised on .Values like the webhook's. On upgrade each
secret already in the cluster is kept, and a missing one is issued again from the kept CA: so
deleting gpupool-extender-tls alone renews the serving pair (new names, say) without touching
the control plane's copy of the client pair, and deleting the CA's secret renews all three.
*/}}
{{- define "gpupool.extenderTLS" -}}
{{- if not (hasKey .Values "__extenderTLS") }}
{{- $ns := .Release.Namespace }}
{{- $t := .Values.extender.tls }}
{{- $days := int $t.days }}
{{- $old := dict }}
{{- range $name := list "gpupool-extender-ca" "gpupool-extender-tls" "gpupool-extender-scheduler-client" }}
{{- $found := lookup "v1" "Secret" $ns $name }}
{{- if and $found (hasKey ($found.data | default dict) "tls.key") }}
{{- $_ := set $old $name $found.data }}
{{- end }}
{{- end }}
{{- $tls := dict }}
{{- $ca := dict }}
{{- if hasKey $old "gpupool-extender-ca" }}
{{- $kept := get $old "gpupool-extender-ca" }}
{{- $ca = buildCustomCert (index $kept "tls.crt") (index $kept "tls.key") }}
{{- $_ := set $tls "ca.crt" (index $kept "tls.crt") }}
{{- $_ := set $tls "ca.key" (index $kept "tls.key") }}
{{- else }}
{{- $ca = genCA "gpupool-extender-ca" $days }}
{{- $_ := set $tls "ca.crt" ($ca.Cert | b64enc) }}
{{- $_ := set $tls "ca.key" ($ca.Key | b64enc) }}
{{- $old = dict }}
{{- end }}
{{- $serving := get $old "gpupool-extender-tls" }}
{{- if and $serving (eq (index $serving "ca.crt") (get $tls "ca.crt")) }}
{{- $_ := set $tls "tls.crt" (index $serving "tls.crt") }}
{{- $_ := set $tls "tls.key" (index $serving "tls.key") }}
{{- else }}
{{- $sans := include "gpupool.extenderSANs" . | fromJson }}
{{- $cert := genSignedCert "gpupool-extender" $sans.ips $sans.dns $days $ca }}
{{- $_ := set $tls "tls.crt" ($cert.Cert | b64enc) }}
{{- $_ := set $tls "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $client := get $old "gpupool-extender-scheduler-client" }}
{{- if and $client (eq (index $client "ca.crt") (get $tls "ca.crt")) }}
{{- $_ := set $tls "client.crt" (index $client "tls.crt") }}
{{- $_ := set $tls "client.key" (index $client "tls.key") }}
{{- else }}
{{- $cert := genSignedCert $t.schedulerClientName nil nil $days $ca }}
{{- $_ := set $tls "client.crt" ($cert.Cert | b64enc) }}
{{- $_ := set $tls "client.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__extenderTLS" $tls }}
{{- end }}
{{- toJson (get .Values "__extenderTLS") }}
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
