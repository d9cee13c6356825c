{{/* Names, labels, the Redis URL, the environment of both processes and the checks values.schema.json cannot express. */}}

{{- define "toolmark.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
A DNS label for every object: a release name may hold dots (Helm allows them), which Service
names may not, and which the pod names (the gateway's node ids, ^[a-z0-9][a-z0-9-]{0,62}$)
would inherit; they become hyphens.
*/}}
{{- define "toolmark.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | replace "." "-" | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | replace "." "-" | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | replace "." "-" | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Component names stay within 63 characters with their suffix. */}}
{{- define "toolmark.gateway.fullname" -}}
{{- printf "%s-gateway" (include "toolmark.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{- define "toolmark.worker.fullname" -}}
{{- printf "%s-worker" (include "toolmark.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{- define "toolmark.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "toolmark.labels" -}}
helm.sh/chart: {{ include "toolmark.chart" . }}
app.kubernetes.io/name: {{ include "toolmark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolmark
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "toolmark.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolmark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "toolmark.gateway.selectorLabels" -}}
{{ include "toolmark.selectorLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "toolmark.worker.selectorLabels" -}}
{{ include "toolmark.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end -}}

{{- define "toolmark.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "toolmark.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "toolmark.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "toolmark.tenantSecretName" -}}
{{- default (printf "%s-tenants" (include "toolmark.fullname" .)) .Values.tenantSecrets.existingSecret -}}
{{- end -}}

{{- define "toolmark.redisSecretName" -}}
{{- default (printf "%s-redis" (include "toolmark.fullname" .)) .Values.redis.existingSecret -}}
{{- end -}}

{{/* Whether the pods get a Redis password from a Secret. */}}
{{- define "toolmark.redisHasPassword" -}}
{{- if or .Values.redis.existingSecret .Values.redis.password -}}true{{- end -}}
{{- end -}}

{{/*
The Redis URL as the gateway reads it, with the password left as the Kubernetes reference
$(TOOLMARK_REDIS_PASSWORD): the kubelet expands it from the variable defined just before, so the
password never appears in the pod spec.
*/}}
{{- define "toolmark.redisUrl" -}}
{{- $r := .Values.redis -}}
{{- $auth := "" -}}
{{- if include "toolmark.redisHasPassword" . -}}
{{- $auth = printf "%s:$(TOOLMARK_REDIS_PASSWORD)@" $r.username -}}
{{- end -}}
{{- $tls := ternary "s" "" $r.tls -}}
{{- if eq $r.mode "standalone" -}}
{{- printf "redis%s://%s%s:%d/%d" $tls $auth $r.host (int $r.port) (int $r.database) -}}
{{- else if eq $r.mode "cluster" -}}
{{- printf "redis%s-cluster://%s%s" $tls $auth (join "," $r.nodes) -}}
{{- else -}}
{{- printf "redis%s-sentinel://%s%s/%s" $tls $auth (join "," $r.nodes) $r.sentinelService -}}
{{- end -}}
{{- end -}}

{{/* The tenants' fields that live in the Secret, in values (camelCase) and Secret key form. */}}
{{- define "toolmark.secretFields" -}}
apiKeys: api_keys
tokenSecret: token_secret
pusherSecret: pusher_secret
pusherOldKeys: pusher_old_keys
webhookSecret: webhook_secret
{{- end -}}

{{/*
Environment shared by the gateway and the worker: logs, traces, the Redis URL, the admin API's
keys (the worker opens the stored tenants' webhook secrets with its encryption key) and every tenant
secret as a TOOLMARK_TENANTS__<index>__<KEY> override of gateway.toml. Secret values are read as
TOML when they parse: api_keys is a TOML array, pusher_old_keys an array of inline tables.
*/}}
{{- define "toolmark.env" -}}
- name: RUST_LOG
  value: {{ .Values.config.logLevel | quote }}
- name: TOOLMARK_LOG_FORMAT
  value: {{ .Values.config.logFormat | quote }}
{{- with .Values.config.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.config.otlpProtocol }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ . | quote }}
{{- end }}
{{- if eq (include "toolmark.brokerKind" .) "redis" }}
{{- if .Values.redis.url.existingSecret }}
- name: TOOLMARK_BROKER__URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.url.existingSecret }}
      key: {{ .Values.redis.url.key }}
{{- else }}
{{- if include "toolmark.redisHasPassword" . }}
- name: TOOLMARK_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "toolmark.redisSecretName" . }}
      key: {{ .Values.redis.existingSecretPasswordKey }}
{{- end }}
- name: TOOLMARK_BROKER__URL
  value: {{ include "toolmark.redisUrl" . | quote }}
{{- end }}
{{- end }}
{{- if include "toolmark.adminEnabled" . }}
- name: TOOLMARK_ADMIN__API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ include "toolmark.adminSecretName" . }}
      key: api_keys
- name: TOOLMARK_ADMIN__ENCRYPTION_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "toolmark.adminSecretName" . }}
      key: encryption_key
{{- if .Values.store.existingSecret }}
- name: TOOLMARK_ADMIN__STORE
  valueFrom:
    secretKeyRef:
      name: {{ .Values.store.existingSecret }}
      key: {{ .Values.store.existingSecretKey }}
{{- else if include "toolmark.sqliteStore" . }}
- name: TOOLMARK_ADMIN__STORE
  value: "sqlite:///var/lib/toolmark/catalog.db"
{{- end }}
{{- end }}
{{- $secret := include "toolmark.tenantSecretName" . -}}
{{- range $i, $t := .Values.tenants }}
- name: TOOLMARK_TENANTS__{{ $i }}__API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $t.id }}.api_keys
{{- if not $t.tokenPublicKey }}
- name: TOOLMARK_TENANTS__{{ $i }}__TOKEN_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $t.id }}.token_secret
{{- end }}
{{- if $t.pusherKey }}
- name: TOOLMARK_TENANTS__{{ $i }}__PUSHER_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $t.id }}.pusher_secret
- name: TOOLMARK_TENANTS__{{ $i }}__PUSHER_OLD_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $t.id }}.pusher_old_keys
      optional: true
{{- end }}
{{- if $t.webhookUrl }}
- name: TOOLMARK_TENANTS__{{ $i }}__WEBHOOK_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $t.id }}.webhook_secret
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod topology spread over zones and nodes for one component. */}}
{{- define "toolmark.topologySpread" -}}
{{- $c := .component -}}
{{- if or $c.values.topologySpread.enabled $c.values.extraTopologySpreadConstraints }}
topologySpreadConstraints:
{{- if $c.values.topologySpread.enabled }}
{{- range $key := list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
  - maxSkew: 1
    topologyKey: {{ $key }}
    whenUnsatisfiable: {{ $c.values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- $c.selector | nindent 8 }}
    matchLabelKeys:
      - pod-template-hash
{{- end }}
{{- end }}
{{- with $c.values.extraTopologySpreadConstraints }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Seconds the kubelet waits after SIGTERM: longer than the preStop sleep plus the drain. */}}
{{- define "toolmark.gateway.gracePeriod" -}}
{{- $g := .Values.gateway -}}
{{- $drain := div (add (int64 .Values.config.drainTimeoutMs) 999) 1000 -}}
{{- $floor := add (int64 $g.preStopSleepSeconds) $drain -}}
{{- if $g.terminationGracePeriodSeconds -}}
{{- if le (int64 $g.terminationGracePeriodSeconds) $floor -}}
{{- fail (printf "gateway.terminationGracePeriodSeconds: %d is too short: it must be longer than gateway.preStopSleepSeconds + config.drainTimeoutMs (%d s), or 0 to derive it" (int64 $g.terminationGracePeriodSeconds) $floor) -}}
{{- end -}}
{{- int64 $g.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add $floor 10 -}}
{{- end -}}
{{- end -}}

{{/*
Checks across values that values.schema.json cannot express; each failure names the value and
what to do. Included by the gateway Deployment, so every install and template runs them.
*/}}
{{- define "toolmark.validate" -}}
{{- $v := .Values -}}
{{- if and (not $v.tenants) (not (include "toolmark.adminEnabled" .)) -}}
{{- fail "tenants: list at least one tenant, or set admin.enabled to create them at run time" -}}
{{- end -}}
{{- if eq (include "toolmark.brokerKind" .) "memory" -}}
{{- if or $v.gateway.autoscaling.enabled (gt (int (include "toolmark.gatewayReplicas" .)) 1) -}}
{{- fail "broker.kind: memory keeps state in one process: set gateway.replicas to 1 and gateway.autoscaling.enabled to false, or use broker.kind: redis" -}}
{{- end -}}
{{- else if not $v.redis.url.existingSecret -}}
{{- if eq $v.redis.mode "standalone" -}}
{{- if not $v.redis.host -}}
{{- fail "redis.host: required with broker.kind: redis and redis.mode: standalone (or give the whole URL in redis.url.existingSecret)" -}}
{{- end -}}
{{- else if not $v.redis.nodes -}}
{{- fail (printf "redis.nodes: list the %s nodes as \"host:port\" (redis.mode: %s)" $v.redis.mode $v.redis.mode) -}}
{{- end -}}
{{- if and (eq $v.redis.mode "sentinel") (not $v.redis.sentinelService) -}}
{{- fail "redis.sentinelService: required with redis.mode: sentinel (the master's name, e.g. mymaster)" -}}
{{- end -}}
{{- if and $v.redis.username (not (include "toolmark.redisHasPassword" .)) -}}
{{- fail "redis.username: needs a password (redis.existingSecret or redis.password)" -}}
{{- end -}}
{{- if and $v.redis.existingSecret $v.redis.password -}}
{{- fail "redis.password: leave it empty when redis.existingSecret is set" -}}
{{- end -}}
{{- end -}}
{{- $fields := include "toolmark.secretFields" . | fromYaml -}}
{{- $seen := dict -}}
{{- range $i, $t := $v.tenants -}}
{{- if hasKey $seen $t.id -}}
{{- fail (printf "tenants[%d].id: duplicate tenant %q" $i $t.id) -}}
{{- end -}}
{{- $_ := set $seen $t.id true -}}
{{- if $v.tenantSecrets.existingSecret -}}
{{- range $field, $key := $fields -}}
{{- if hasKey $t $field -}}
{{- fail (printf "tenants[%d].%s: with tenantSecrets.existingSecret the secret fields come from that Secret (key %q); remove it from values" $i $field (printf "%s.%s" $t.id $key)) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- if not $t.apiKeys -}}
{{- fail (printf "tenants[%d].apiKeys: at least one \"sha256:<hex>\" key hash is required (or use tenantSecrets.existingSecret)" $i) -}}
{{- end -}}
{{- if and $t.tokenPublicKey $t.tokenSecret -}}
{{- fail (printf "tenants[%d].tokenSecret: set tokenSecret (HS256) or tokenPublicKey (EdDSA, ES256), not both" $i) -}}
{{- end -}}
{{- if not (or $t.tokenPublicKey $t.tokenSecret) -}}
{{- fail (printf "tenants[%d].tokenSecret: set tokenSecret (HS256, at least 32 bytes) or tokenPublicKey (EdDSA, ES256)" $i) -}}
{{- end -}}
{{- if and $t.pusherKey (not $t.pusherSecret) -}}
{{- fail (printf "tenants[%d].pusherSecret: required with pusherKey" $i) -}}
{{- end -}}
{{- if and $t.pusherSecret (not $t.pusherKey) -}}
{{- fail (printf "tenants[%d].pusherKey: required with pusherSecret" $i) -}}
{{- end -}}
{{- if and $t.webhookUrl (not $t.webhookSecret) -}}
{{- fail (printf "tenants[%d].webhookSecret: required with webhookUrl" $i) -}}
{{- end -}}
{{- end -}}
{{- with $t.limits -}}
{{- if and .defaultCallTimeoutMs (gt (int64 .defaultCallTimeoutMs) (int64 (default 600000 .maxCallTimeoutMs))) -}}
{{- fail (printf "tenants[%d].limits.defaultCallTimeoutMs: must not exceed limits.maxCallTimeoutMs" $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $hook := $v.worker.webhook -}}
{{- if le (int64 (default 30000 $hook.claimAfterMs)) (int64 (default 10000 $hook.timeoutMs)) -}}
{{- fail "worker.webhook.claimAfterMs: must exceed worker.webhook.timeoutMs (defaults 30000 and 10000), or a slow delivery is taken over by another worker while it is still running" -}}
{{- end -}}
{{- if and $v.ingress.enabled (not $v.ingress.hosts) -}}
{{- fail "ingress.hosts: list at least one host name with ingress.enabled" -}}
{{- end -}}
{{- if and $v.httpRoute.enabled (not $v.httpRoute.parentRefs) -}}
{{- fail "httpRoute.parentRefs: name the Gateway (and listener) the route attaches to" -}}
{{- end -}}
{{- if not $v.image.repository -}}
{{- fail "image.repository: set it to where you pushed the image built from the repository's Dockerfile (docs/deploy.md, step 1)" -}}
{{- end -}}
{{- end -}}

{{/*
The broker: broker.kind, or when it is empty, redis as soon as anything of a Redis is given
(a host, nodes, a URL, a password, TLS, another mode: then what is missing is refused), and
memory otherwise (one replica, no worker: what an install with the chart's defaults runs).
*/}}
{{- define "toolmark.brokerKind" -}}
{{- if .Values.broker.kind -}}
{{- .Values.broker.kind -}}
{{- else if or .Values.redis.host .Values.redis.nodes .Values.redis.url.existingSecret .Values.redis.existingSecret .Values.redis.password .Values.redis.username .Values.redis.tls (ne .Values.redis.mode "standalone") -}}
redis
{{- else -}}
memory
{{- end -}}
{{- end -}}

{{/* gateway.replicas, or when it is null: 1 with the memory broker, 2 with Redis. */}}
{{- define "toolmark.gatewayReplicas" -}}
{{- if kindIs "invalid" .Values.gateway.replicas -}}
{{- if eq (include "toolmark.brokerKind" .) "memory" }}1{{ else }}2{{ end -}}
{{- else -}}
{{- int64 .Values.gateway.replicas -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the admin API runs: admin.enabled, or when it is null, when no tenant is listed
(tenants are then created at run time). Empty otherwise.
*/}}
{{- define "toolmark.adminEnabled" -}}
{{- if kindIs "bool" .Values.admin.enabled -}}
{{- if .Values.admin.enabled }}true{{ end -}}
{{- else if not .Values.tenants -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when the admin API's records live in a SQLite file on the chart's PersistentVolumeClaim:
store.sqlite.enabled, or when it is null, with the memory broker, the admin API and no
store.existingSecret. Empty otherwise.
*/}}
{{- define "toolmark.sqliteStore" -}}
{{- $s := .Values.store -}}
{{- if and (include "toolmark.adminEnabled" .) (not $s.existingSecret) -}}
{{- if kindIs "bool" $s.sqlite.enabled -}}
{{- if $s.sqlite.enabled }}true{{ end -}}
{{- else if eq (include "toolmark.brokerKind" .) "memory" }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* The Secret of the admin API's keys: admin.existingSecret, or the one the chart makes. */}}
{{- define "toolmark.adminSecretName" -}}
{{- default (printf "%s-admin" (include "toolmark.fullname" .)) .Values.admin.existingSecret -}}
{{- end -}}
