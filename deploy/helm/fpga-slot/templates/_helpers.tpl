{{/* The fpga-slot image: repository:tag. */}}
{{- define "fpga-slot.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* Labels Helm's own conventions add to every object's metadata (never to selectors or pod templates). */}}
{{- define "fpga-slot.chartLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Whether the fpga-slot-certs Job makes the certificates (the extender is on and cert-manager is not asked). */}}
{{- define "fpga-slot.certsJob" -}}
{{- if and .Values.extender.enabled (eq .Values.certificates.source "job") }}true{{ end }}
{{- end }}

{{/* A scheduler configuration file from files/, in this release's namespace (and at 127.0.0.1 on the host network). */}}
{{- define "fpga-slot.schedulerConfig" -}}
{{- $file := ternary "files/scheduler-config-dra.yaml" "files/scheduler-config.yaml" (eq .Values.mode "dra") }}
{{- $config := .Files.Get $file }}
{{- $service := printf "fpga-slot-extender.%s.svc" .Release.Namespace }}
{{- $config = $config | replace "resourceNamespace: fpga-slot\n" (printf "resourceNamespace: %s\n" .Release.Namespace) }}
{{- if .Values.hostNetwork }}
{{- $config = $config | replace "urlPrefix: https://fpga-slot-extender.fpga-slot.svc:8888" "urlPrefix: https://127.0.0.1:8888" }}
{{- $config = $config | replace "      caFile: /etc/kubernetes/fpga-scheduler-tls/ca.crt\n" (printf "      caFile: /etc/kubernetes/fpga-scheduler-tls/ca.crt\n      # The extender answers on 127.0.0.1 here; its certificate names the Service.\n      serverName: %s\n" $service) }}
{{- else }}
{{- $config = $config | replace "fpga-slot-extender.fpga-slot.svc" $service }}
{{- end }}
{{- $config }}
{{- end }}

{{/* Pod annotations: the values' own, and Prometheus's scrape annotations when asked for. */}}
{{- define "fpga-slot.podAnnotations" -}}
{{- $annotations := deepCopy (.annotations | default dict) }}
{{- if .scrape }}
{{- $_ := set $annotations "prometheus.io/scrape" "true" }}
{{- $_ := set $annotations "prometheus.io/port" (toString .port) }}
{{- $_ := set $annotations "prometheus.io/path" "/metrics" }}
{{- end }}
{{- if $annotations }}
annotations:
  {{- toYaml $annotations | nindent 2 }}
{{- end }}
{{- end }}
