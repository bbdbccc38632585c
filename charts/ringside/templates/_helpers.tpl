{{/* The name of the chart, and the prefix of every object's name. */}}
{{- define "ringside.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ringside.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; "ringside.labels" takes (dict "root" $ "component" "x"). */}}
{{- define "ringside.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "ringside.selectorLabels" . }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ringside.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ringside.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ringside.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "ringside.sidecarImage" -}}
{{- $s := .Values.webhook.sidecar.image -}}
{{- printf "%s:%s" (default .Values.image.repository $s.repository) (default (default .Chart.AppVersion .Values.image.tag) $s.tag) -}}
{{- end -}}

{{/* etcd: the client URLs, and the Secret with ca.crt, tls.crt and tls.key for a client. */}}
{{- define "ringside.etcd.headless" -}}{{ include "ringside.fullname" . }}-etcd-headless{{- end -}}
{{- define "ringside.etcd.endpoints" -}}
{{- if eq .Values.etcd.mode "external" -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- else -}}
{{- $fn := include "ringside.fullname" . -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.statefulset.replicas) -}}
{{- $eps = append $eps (printf "https://%s-etcd-%d.%s.%s.svc.%s:2379" $fn $i (include "ringside.etcd.headless" $) $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $eps -}}
{{- end -}}
{{- end -}}

{{- define "ringside.etcd.clientSecret" -}}
{{- if eq .Values.etcd.mode "external" -}}
{{- .Values.etcd.external.tlsSecret -}}
{{- else -}}
{{- include "ringside.fullname" . }}-etcd-client
{{- end -}}
{{- end -}}

{{- define "ringside.gossipSecret" -}}
{{- if .Values.gossip.generate -}}
{{- include "ringside.fullname" . }}-gossip
{{- else -}}
{{- .Values.gossip.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* The pod-level and container-level security contexts. */}}
{{- define "ringside.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}
{{- define "ringside.securityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/* A NetworkPolicy ingress rule opening the metrics port to the monitoring namespace. */}}
{{- define "ringside.metricsFrom" -}}
{{- if .Values.networkPolicy.metricsNamespaceSelector }}
- from:
    - namespaceSelector:
        matchLabels:
          {{- toYaml .Values.networkPolicy.metricsNamespaceSelector | nindent 10 }}
  ports:
    - port: metrics
{{- end }}
{{- end }}

{{- /* ringside.checkKubeVersion fails an install on a cluster older than 1.29:
       the injected sidecar is a native sidecar (an init container with
       restartPolicy Always), which an older API server would drop without a
       word, leaving pods stuck in their init containers. It is not a
       kubeVersion in Chart.yaml: that would fail every plain `helm template`
       (helm renders offline as Kubernetes 1.20). Offline, lookup finds
       nothing, and the check is left to the install. */}}
{{- define "ringside.checkKubeVersion" -}}
{{- if and (lookup "v1" "Namespace" "" "kube-system") (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "ringside needs Kubernetes 1.29 or later (its sidecar is a native sidecar); this cluster runs %s" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end -}}
