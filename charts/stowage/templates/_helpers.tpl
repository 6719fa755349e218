{{/* Names: "<fullname>-<component>"; the release name alone when it already contains "stowage". */}}
{{- define "stowage.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stowage.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<fullname>-<component>": pass (list $ "component"). */}}
{{- define "stowage.componentName" -}}
{{- printf "%s-%s" (include "stowage.fullname" (index . 0)) (index . 1) }}
{{- end }}

{{- define "stowage.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; pass (list $ "component"), component may be "". */}}
{{- define "stowage.labels" -}}
{{- $ := index . 0 -}}
helm.sh/chart: {{ include "stowage.chart" $ }}
app.kubernetes.io/name: {{ include "stowage.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
app.kubernetes.io/part-of: stowage
{{- with index . 1 }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* Selector labels of a component's pods; pass (list $ "component"). */}}
{{- define "stowage.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "stowage.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "stowage.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
kube-scheduler's tag: scheduler.image.tag when pinned, else the cluster's own version (major.minor.patch of
.Capabilities.KubeVersion, a provider suffix such as -gke.1 or -eks-a1 dropped: upstream publishes every patch
release). Same minor as the API server: the skew policy lets kube-scheduler be one minor older, never newer.
*/}}
{{- define "stowage.schedulerTag" -}}
{{- .Values.scheduler.image.tag | default (regexReplaceAll "^v?([0-9]+\\.[0-9]+\\.[0-9]+).*$" .Capabilities.KubeVersion.Version "v${1}") }}
{{- end }}

{{- define "stowage.settingsName" -}}
{{- include "stowage.componentName" (list . "settings") }}
{{- end }}

{{/* The webhook Service's name, the certificate's DNS names and Secret. */}}
{{- define "stowage.webhookService" -}}
{{- include "stowage.componentName" (list . "operator-webhook") }}
{{- end }}
{{- define "stowage.webhookSecret" -}}
{{- include "stowage.componentName" (list . "webhook-cert") }}
{{- end }}

{{/* True when ServiceMonitor/PodMonitor objects are rendered instead of scrape annotations. */}}
{{- define "stowage.prometheusOperator" -}}
{{- $mode := toString .Values.monitoring.prometheusOperator }}
{{- if or (eq $mode "true") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) }}true{{ end }}
{{- end }}

{{/* prometheus.io/* annotations when no Prometheus Operator monitor scrapes the pod; pass (list $ port). */}}
{{- define "stowage.scrapeAnnotations" -}}
{{- $ := index . 0 -}}
{{- if not (include "stowage.prometheusOperator" $) -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ index . 1 | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{/* Arguments every Stowage component shares. */}}
{{- define "stowage.configArg" -}}
- --config=/etc/stowage/settings.yaml
{{- end }}

{{- define "stowage.settingsVolume" -}}
- name: settings
  configMap:
    name: {{ include "stowage.settingsName" . }}
{{- end }}

{{- define "stowage.settingsMount" -}}
- name: settings
  mountPath: /etc/stowage
  readOnly: true
{{- end }}

{{/* An emptyDir for /tmp: the root filesystem is read-only. */}}
{{- define "stowage.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end }}
{{- define "stowage.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}

{{- define "stowage.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end }}

{{- define "stowage.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end }}

{{- define "stowage.pullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The extender container: a sidecar of the scheduler pod, or alone (scheduler.enabled=false). */}}
{{- define "stowage.extenderContainer" -}}
{{- $ := . -}}
- name: extender
  image: {{ include "stowage.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - extender
    # 0.0.0.0: the scheduler calls 127.0.0.1, Prometheus scrapes the pod IP.
    - --host=0.0.0.0
    - --port={{ int .Values.extender.port }}
    {{- include "stowage.configArg" . | nindent 4 }}
    {{- with .Values.prometheus.url }}
    - {{ printf "--prometheus-url=%s" . | quote }}
    {{- end }}
    - {{ printf "--prometheus-interval=%v" $.Values.extender.prometheusInterval | quote }}
    - --log-level={{ $.Values.extender.logLevel }}
  ports:
    - name: http
      containerPort: {{ int .Values.extender.port }}
  livenessProbe:
    httpGet: {path: /healthz, port: http}
    periodSeconds: 10
  # 503 until the node and pod caches synced.
  readinessProbe:
    httpGet: {path: /readyz, port: http}
    periodSeconds: 5
  resources:
    {{- toYaml $.Values.extender.resources | nindent 4 }}
  securityContext:
    {{- include "stowage.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    {{- include "stowage.settingsMount" . | nindent 4 }}
    {{- include "stowage.tmpMount" . | nindent 4 }}
{{- end }}

{{- /*
A settings map with every numeric string made a number. `helm --set` passes a fraction as a string
(`--set settings.harvest.t_alloc.cpu=0.8` gives "0.8"); the schema accepts it in range, and the settings file
the components read carries a number, as `--set-json` or a values file would give. Returns JSON (a template
returns text): recursion goes through fromJson.
*/ -}}
{{- define "stowage.numericSettings" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- if kindIs "map" $value -}}
{{- $_ := set $out $key (include "stowage.numericSettings" $value | fromJson) -}}
{{- else if and (kindIs "string" $value) (regexMatch "^[0-9]*\\.?[0-9]+$" $value) -}}
{{- $_ := set $out $key (float64 $value) -}}
{{- else -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}
