{{/* Names and shared pod parts of the reasonwire chart. */}}
{{- define "reasonwire.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "reasonwire.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "reasonwire.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "reasonwire.secretName" -}}
{{- default (printf "%s-secret" (include "reasonwire.fullname" .)) .Values.secret.existingSecret -}}
{{- end -}}

{{/* repository@digest when image.digest is set (the tag is then ignored), else repository:tag. */}}
{{- define "reasonwire.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "reasonwire.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "reasonwire.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The gateway's key book: a Secret named by gateway.keys.existingSecret, or the chart's own
     from gateway.keys.keyBook; empty when neither is set. */}}
{{- define "reasonwire.gatewayKeysSecret" -}}
{{- if .Values.gateway.keys.existingSecret -}}
{{- .Values.gateway.keys.existingSecret -}}
{{- else if .Values.gateway.keys.keyBook -}}
{{- printf "%s-gateway-keys" (include "reasonwire.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: longer than a drain (values.drainSeconds) by a margin. */}}
{{- define "reasonwire.grace" -}}
{{- add (int .Values.drainSeconds) (int .Values.graceMarginSeconds) -}}
{{- end -}}

{{/* env: the ConfigMap, then the Secret (credentials win over config). */}}
{{- define "reasonwire.envFrom" -}}
envFrom:
  - configMapRef:
      name: {{ include "reasonwire.fullname" . }}-config
  - secretRef:
      name: {{ include "reasonwire.secretName" . }}
{{- end -}}

{{/* The pod's volumes: /tmp (the root file system is read-only), the Kafka TLS files, and the
     gateway's key book. Called with (dict "root" . "component" name). */}}
{{- define "reasonwire.volumes" -}}
{{- $keys := include "reasonwire.gatewayKeysSecret" .root }}
volumes:
  - name: tmp
    emptyDir: {}
{{- if .root.Values.kafka.tlsSecretName }}
  - name: kafka-tls
    secret:
      secretName: {{ .root.Values.kafka.tlsSecretName }}
{{- end }}
{{- if and (eq .component "gateway") $keys }}
  - name: gateway-keys
    secret:
      secretName: {{ $keys }}
      items:
        - key: {{ .root.Values.gateway.keys.secretKey }}
          path: keys.json
{{- end }}
{{- end -}}

{{- define "reasonwire.mounts" -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- if .root.Values.kafka.tlsSecretName }}
  - name: kafka-tls
    mountPath: /etc/reasonwire/kafka-tls
    readOnly: true
{{- end }}
{{- if and (eq .component "gateway") (include "reasonwire.gatewayKeysSecret" .root) }}
  - name: gateway-keys
    mountPath: /etc/reasonwire/gateway
    readOnly: true
{{- end }}
{{- end -}}

{{/* Liveness and readiness on the worker's health server (RW_HEALTH_PORT). */}}
{{- define "reasonwire.workerProbes" -}}
ports:
  - name: health
    containerPort: {{ .Values.health.port }}
livenessProbe:
  httpGet: {path: /healthz, port: health}
  initialDelaySeconds: 10
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: health}
  initialDelaySeconds: 5
  periodSeconds: 5
  failureThreshold: 2
{{ include "reasonwire.startupProbe" (dict "root" . "port" "health") }}
{{- end -}}

{{/* Liveness waits until /healthz first answers, for up to periodSeconds × failureThreshold. */}}
{{- define "reasonwire.startupProbe" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: {{ .root.Values.startupProbe.periodSeconds }}
  failureThreshold: {{ .root.Values.startupProbe.failureThreshold }}
{{- end -}}

{{- define "reasonwire.pod" -}}
terminationGracePeriodSeconds: {{ include "reasonwire.grace" .root }}
{{- if or (ne .component "topics") (not .root.Values.serviceAccount.create) }}
serviceAccountName: {{ include "reasonwire.serviceAccountName" .root }}
{{- end }}
automountServiceAccountToken: false
securityContext: {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- if and .root.Values.topologySpread.enabled (ne .component "topics") }}
topologySpreadConstraints:
{{- range .root.Values.topologySpread.topologyKeys }}
  - maxSkew: {{ $.root.Values.topologySpread.maxSkew }}
    topologyKey: {{ . }}
    whenUnsatisfiable: {{ $.root.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels: {{- include "reasonwire.selector" $ | nindent 8 }}
{{- end }}
{{- end }}
{{- with .root.Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{ include "reasonwire.volumes" . }}
{{- end -}}

{{/* The non-secret settings every component reads: the ConfigMap's data, and the topics Job's
     pre-install copy of it (a pre-install hook runs before the release's ConfigMap exists). */}}
{{- define "reasonwire.configData" -}}
KAFKA_BOOTSTRAP_SERVERS: {{ .Values.kafka.bootstrapServers | quote }}
KAFKA_SECURITY_PROTOCOL: {{ .Values.kafka.securityProtocol | quote }}
{{- with .Values.kafka.saslMechanism }}
KAFKA_SASL_MECHANISM: {{ . | quote }}
{{- end }}
{{- if .Values.kafka.tlsSecretName }}
KAFKA_SSL_CAFILE: /etc/reasonwire/kafka-tls/ca.crt
KAFKA_SSL_CERTFILE: /etc/reasonwire/kafka-tls/tls.crt
KAFKA_SSL_KEYFILE: /etc/reasonwire/kafka-tls/tls.key
{{- end }}
RW_PARTITIONS: {{ .Values.partitions | quote }}
RW_HEALTH_PORT: {{ .Values.health.port | quote }}
RW_REDIS_CLUSTER: {{ ternary "1" "0" .Values.redis.cluster | quote }}
{{- if .Values.metrics.enabled }}
OTEL_METRICS_EXPORTER: {{ .Values.metrics.exporters | quote }}
{{- end }}
{{- range $k, $v := .Values.config }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* The Secret's stringData (REDIS_URL and the non-empty secret.values); see the configData note. */}}
{{- define "reasonwire.secretData" -}}
REDIS_URL: {{ .Values.redis.url | quote }}
{{- range $k, $v := .Values.secret.values }}
{{- if $v }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod annotations for Prometheus' kubernetes_sd "prometheus.io/*" convention: GET /metrics on the
     health port (workers) or the HTTP port (gateway); metrics.enabled=false leaves them off. */}}
{{- define "reasonwire.scrape" -}}
{{- if .root.Values.metrics.enabled }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}
