{{/*
kube-scheduler's configuration with gpupool's extender: a file for the control-plane nodes.
Rendered into the ConfigMap gpupool-scheduler-config (configmap.yaml) and, by
tools/helm/render-manifests.sh, into deploy/scheduler/kube-scheduler-config.yaml.
*/}}
{{- define "gpupool.schedulerConfig" -}}
# kube-scheduler's configuration with gpupool's extender: a file for the control-plane nodes, not
# an object to `kubectl apply`. With kubeadm: copy it to /etc/kubernetes/gpupool-scheduler.yaml on
# every control-plane node, and in /etc/kubernetes/manifests/kube-scheduler.yaml add
# `--config=/etc/kubernetes/gpupool-scheduler.yaml` to the command and a read-only hostPath
# mount of that file (the kubelet restarts the static pod when the manifest changes). A scheduler
# already run with --config: merge the `extenders` entries and percentageOfNodesToScore into its
# file instead.
#
# kube-scheduler calls the first extender entry (filter, prioritize, bind) only for pods that
# request one of managedResources (the resources gpupool's webhook and users put on GPU pods). It
# leaves those resources to the extender (ignoredByScheduler): no node advertises gpu-memory,
# gpu-compute or gpu, and the extender accounts for vgpu per card. Its filter answers the
# planner's pick alone (unless the pod has soft preferences, or a fitting node a PreferNoSchedule
# taint it does not tolerate), so kube-scheduler skips scoring for most GPU pods, prioritize
# included; the weight below counts for the pods still scored. The second entry only scores
# every other pod (prioritize-cpu: nodes without gpupool GPUs first, then packed onto as few GPU
# nodes as they need, so they do not strand GPUs); it is ignorable, so those pods are scheduled
# as before while the extender is down. weight 5: the planner's pick outweighs kube-scheduler's
# resource-spreading scores; percentageOfNodesToScore 100: the pick is among the nodes scored
# (docs/extender.md, "How kube-scheduler and gpupool choose a node").
#
# urlPrefix: kube-scheduler usually runs on the host network, where the cluster's DNS names may not
# resolve; if so, set the chart's scheduler.extenderURL to the Service's ClusterIP
# (`kubectl -n NAMESPACE get svc gpupool-extender -o jsonpath='{.spec.clusterIP}'`): the chart
# puts that URL's host into the extender's serving certificate.
#
# tlsConfig: kube-scheduler checks the extender's serving certificate against caFile and presents
# certFile/keyFile, the only client certificate besides the extender's own that it answers.
# Copy the three keys of the secret gpupool-extender-scheduler-client into that folder on every
# control-plane node (docs/install.md) and mount it read-only into kube-scheduler's pod.
#
# The `extenders` entries are what gpupool.devcluster.scheduler_config.ExtenderConfig(...).entries()
# builds for the dev cluster's kube-scheduler (tests/unit/deploy checks they are equal). The rest
# is for a real control plane: its own kubeconfig, and leader election among the schedulers of an
# HA control plane (the dev cluster runs one scheduler without).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {{ .Values.scheduler.kubeconfig }}
leaderElection:
  leaderElect: true
percentageOfNodesToScore: 100
extenders:
  - urlPrefix: {{ include "gpupool.extenderURL" . }}
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: 5
    nodeCacheCapable: true
    enableHTTPS: {{ hasPrefix "https://" (include "gpupool.extenderURL" .) }}
    {{- if .Values.extender.tls.enabled }}
    # kube-scheduler's client pair for the extender and the CA that signed the extender's serving
    # certificate: the files of the secret gpupool-extender-scheduler-client, copied here.
    tlsConfig:
      certFile: {{ .Values.scheduler.tlsDir }}/tls.crt
      keyFile: {{ .Values.scheduler.tlsDir }}/tls.key
      caFile: {{ .Values.scheduler.tlsDir }}/ca.crt
    {{- end }}
    httpTimeout: 5s
    managedResources:
      - {name: gpupool.io/vgpu, ignoredByScheduler: true}
      - {name: gpupool.io/gpu-memory, ignoredByScheduler: true}
      - {name: gpupool.io/gpu-compute, ignoredByScheduler: true}
      - {name: gpupool.io/gpu, ignoredByScheduler: true}
  - urlPrefix: {{ include "gpupool.extenderURL" . }}
    prioritizeVerb: prioritize-cpu
    weight: 5
    nodeCacheCapable: true
    enableHTTPS: {{ hasPrefix "https://" (include "gpupool.extenderURL" .) }}
    {{- if .Values.extender.tls.enabled }}
    tlsConfig:
      certFile: {{ .Values.scheduler.tlsDir }}/tls.crt
      keyFile: {{ .Values.scheduler.tlsDir }}/tls.key
      caFile: {{ .Values.scheduler.tlsDir }}/ca.crt
    {{- end }}
    httpTimeout: 2s
    ignorable: true
{{- end }}
