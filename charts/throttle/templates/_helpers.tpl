{{/* Names and labels. */}}

{{- define "throttle.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object names: the release name, or release-chart when the release name lacks the chart's. */}}
{{- define "throttle.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "throttle.selectorLabels" -}}
app.kubernetes.io/name: {{ include "throttle.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "throttle.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "throttle.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: throttle
{{- end }}

{{/* The Secret the chart makes for REDIS_URL and DATABASE_URL given as values. */}}
{{- define "throttle.secretName" -}}
{{- include "throttle.fullname" . }}
{{- end }}

{{/* The in-cluster DNS name of the Service. */}}
{{- define "throttle.serviceHost" -}}
{{- printf "%s.%s.svc.%s" (include "throttle.fullname" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* The gateway pods' labels the EnvoyFilter selects (YAML). */}}
{{- define "throttle.gatewaySelector" -}}
{{- toYaml (.Values.istio.envoyFilter.workloadSelector | default (dict "istio" "ingressgateway")) }}
{{- end }}

{{/* Where the descriptors ConfigMap is mounted: DESCRIPTORS_DIR. */}}
{{- define "throttle.descriptorsDir" -}}
/etc/throttle/descriptors
{{- end }}

{{/* "true" when the pod gets a descriptors ConfigMap (the chart's or an existing one). */}}
{{- define "throttle.hasDescriptors" -}}
{{- if or .Values.descriptors.files .Values.descriptors.existingConfigMap }}true{{ end }}
{{- end }}

{{/* URL escaping: urlquery escapes every reserved character; its "+" for a
space is wrong outside a query, and it leaves no other "+", so "%20" is exact. */}}
{{- define "throttle.escape" -}}
{{- urlquery . | replace "+" "%20" }}
{{- end }}

{{/*
throttle.redisURL is REDIS_URL built from redis.* (see values.yaml), or ""
when counters stay in memory. Forms (README, "Production: Redis and PostgreSQL"):
  single:   redis[s]://[user:password@]host:port/db
  sentinel: redis[s]://[sentinelUser:sentinelPassword@]sentinel1/db?master_name=M&addr=sentinel2…&username=…&password=…
  cluster:  redis[s]://[user:password@]node1?cluster=true&addr=node2…
*/}}
{{- define "throttle.redisURL" -}}
{{- $r := .Values.redis }}
{{- if $r.url }}
{{- if $r.addresses }}
{{- fail "redis.url and redis.addresses are both set: give the whole REDIS_URL in redis.url, or the parts in redis.mode, redis.addresses, …" }}
{{- end }}
{{- $r.url }}
{{- else if $r.addresses }}
{{- $scheme := ternary "rediss" "redis" $r.tls }}
{{- $user := $r.username }}
{{- $pass := $r.password }}
{{- if eq $r.mode "sentinel" }}
{{- $user = $r.sentinel.username }}
{{- $pass = $r.sentinel.password }}
{{- end }}
{{- $auth := "" }}
{{- if or $user $pass }}
{{- $auth = printf "%s:%s@" (include "throttle.escape" $user) (include "throttle.escape" $pass) }}
{{- end }}
{{- $query := list }}
{{- if eq $r.mode "cluster" }}
{{- if ne (int $r.db) 0 }}
{{- fail (printf "redis.db is %v, but Redis Cluster has only database 0 (redis.mode cluster)" $r.db) }}
{{- end }}
{{- $query = append $query "cluster=true" }}
{{- else if eq $r.mode "sentinel" }}
{{- if not $r.sentinel.masterName }}
{{- fail "redis.sentinel.masterName is required with redis.mode sentinel (the name the sentinels monitor, such as mymaster)" }}
{{- end }}
{{- $query = append $query (printf "master_name=%s" (urlquery $r.sentinel.masterName)) }}
{{- else if gt (len $r.addresses) 1 }}
{{- fail (printf "redis.addresses has %d entries, but redis.mode single takes one; use mode sentinel or cluster for more" (len $r.addresses)) }}
{{- end }}
{{- range rest $r.addresses }}
{{- /* host:port, as the schema allows: nothing to escape. */}}
{{- $query = append $query (printf "addr=%s" .) }}
{{- end }}
{{- if eq $r.mode "sentinel" }}
{{- if $r.username }}{{ $query = append $query (printf "username=%s" (urlquery $r.username)) }}{{ end }}
{{- if $r.password }}{{ $query = append $query (printf "password=%s" (urlquery $r.password)) }}{{ end }}
{{- end }}
{{- range $k, $v := $r.options }}
{{- if has $k (list "addr" "cluster" "master_name" "username" "password" "db") }}
{{- fail (printf "redis.options.%s: set it with the redis value for it (redis.addresses, redis.mode, redis.sentinel.masterName, redis.username, redis.password, redis.db)" $k) }}
{{- end }}
{{- $query = append $query (printf "%s=%s" (urlquery $k) (urlquery (toString $v))) }}
{{- end }}
{{- $path := ternary "" (printf "/%d" (int $r.db)) (eq $r.mode "cluster") }}
{{- printf "%s://%s%s%s" $scheme $auth (first $r.addresses) $path }}
{{- if $query }}?{{ join "&" $query }}{{ end }}
{{- else if or $r.username $r.password $r.sentinel.masterName }}
{{- fail "redis.username, redis.password or redis.sentinel.masterName is set but redis.addresses is empty: list the Redis (or sentinel, or cluster node) addresses as host:port" }}
{{- end }}
{{- end }}

{{/* "true" when REDIS_URL comes from the chart's Secret. */}}
{{- define "throttle.redisInSecret" -}}
{{- if and (not .Values.redis.existingSecret.name) (include "throttle.redisURL" .) }}true{{ end }}
{{- end }}

{{/* "true" when DATABASE_URL comes from the chart's Secret. */}}
{{- define "throttle.databaseInSecret" -}}
{{- if and (not .Values.database.existingSecret.name) .Values.database.url }}true{{ end }}
{{- end }}

{{/* "true" when ADMIN_API_KEY comes from the chart's Secret. */}}
{{- define "throttle.adminKeyInSecret" -}}
{{- if and (not .Values.adminKey.existingSecret.name) .Values.adminKey.value }}true{{ end }}
{{- end }}

{{/* throttle.configEnv: the environment variable of a config key, SCREAMING_SNAKE_CASE. */}}
{{- define "throttle.configEnv" -}}
{{- . | snakecase | upper }}
{{- end }}

{{/*
throttle.tls is the TLS of tls.* (values.yaml) as YAML: volumes (name,
secretName, mountPath), one per Secret a part reads, and env, the settings
naming the mounted files.
*/}}
{{- define "throttle.tls" -}}
{{- $t := .Values.tls }}
{{- $dir := "/etc/throttle/tls" }}
{{- $volumes := list }}
{{- $env := list }}
{{- if $t.grpc.secretName }}
{{- $volumes = append $volumes (dict "name" "tls-grpc" "secretName" $t.grpc.secretName "mountPath" (printf "%s/grpc" $dir)) }}
{{- $env = append $env (dict "name" "GRPC_SERVER_USE_TLS" "value" "true") }}
{{- $env = append $env (dict "name" "GRPC_SERVER_TLS_CERT" "value" (printf "%s/grpc/tls.crt" $dir)) }}
{{- $env = append $env (dict "name" "GRPC_SERVER_TLS_KEY" "value" (printf "%s/grpc/tls.key" $dir)) }}
{{- if $t.grpc.clientCA.secretName }}
{{- $volumes = append $volumes (dict "name" "tls-grpc-client-ca" "secretName" $t.grpc.clientCA.secretName "mountPath" (printf "%s/grpc-client-ca" $dir)) }}
{{- $env = append $env (dict "name" "GRPC_CLIENT_TLS_CACERT" "value" (printf "%s/grpc-client-ca/%s" $dir $t.grpc.clientCA.key)) }}
{{- end }}
{{- if $t.grpc.clientSANs }}
{{- if not $t.grpc.clientCA.secretName }}
{{- fail "tls.grpc.clientSANs needs tls.grpc.clientCA.secretName: only a verified client certificate has SANs to check" }}
{{- end }}
{{- $env = append $env (dict "name" "GRPC_CLIENT_TLS_SAN" "value" (join "," $t.grpc.clientSANs)) }}
{{- end }}
{{- else if or $t.grpc.clientCA.secretName $t.grpc.clientSANs }}
{{- fail "tls.grpc.clientCA or tls.grpc.clientSANs is set but tls.grpc.secretName is empty: client certificates are asked over TLS" }}
{{- end }}
{{- if $t.http.secretName }}
{{- $volumes = append $volumes (dict "name" "tls-http" "secretName" $t.http.secretName "mountPath" (printf "%s/http" $dir)) }}
{{- $env = append $env (dict "name" "HTTP_TLS_CERT" "value" (printf "%s/http/tls.crt" $dir)) }}
{{- $env = append $env (dict "name" "HTTP_TLS_KEY" "value" (printf "%s/http/tls.key" $dir)) }}
{{- if $t.http.clientCA.secretName }}
{{- $volumes = append $volumes (dict "name" "tls-http-client-ca" "secretName" $t.http.clientCA.secretName "mountPath" (printf "%s/http-client-ca" $dir)) }}
{{- $env = append $env (dict "name" "HTTP_CLIENT_TLS_CACERT" "value" (printf "%s/http-client-ca/%s" $dir $t.http.clientCA.key)) }}
{{- end }}
{{- else if $t.http.clientCA.secretName }}
{{- fail "tls.http.clientCA is set but tls.http.secretName is empty: client certificates are asked over TLS" }}
{{- end }}
{{- $r := $t.redis }}
{{- if or $r.ca.secretName $r.clientSecretName $r.skipHostnameVerification }}
{{- $url := include "throttle.redisURL" . }}
{{- if and (not .Values.redis.existingSecret.name) (not (hasPrefix "rediss://" $url)) }}
{{- fail "tls.redis is set but REDIS_URL is not rediss://: set redis.tls true (or a rediss:// redis.url)" }}
{{- end }}
{{- if $r.ca.secretName }}
{{- $volumes = append $volumes (dict "name" "tls-redis-ca" "secretName" $r.ca.secretName "mountPath" (printf "%s/redis-ca" $dir)) }}
{{- $env = append $env (dict "name" "REDIS_TLS_CACERT" "value" (printf "%s/redis-ca/%s" $dir $r.ca.key)) }}
{{- end }}
{{- if $r.clientSecretName }}
{{- $volumes = append $volumes (dict "name" "tls-redis-client" "secretName" $r.clientSecretName "mountPath" (printf "%s/redis-client" $dir)) }}
{{- $env = append $env (dict "name" "REDIS_TLS_CLIENT_CERT" "value" (printf "%s/redis-client/tls.crt" $dir)) }}
{{- $env = append $env (dict "name" "REDIS_TLS_CLIENT_KEY" "value" (printf "%s/redis-client/tls.key" $dir)) }}
{{- end }}
{{- if $r.skipHostnameVerification }}
{{- $env = append $env (dict "name" "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION" "value" "true") }}
{{- end }}
{{- end }}
{{- toYaml (dict "volumes" $volumes "env" $env) }}
{{- end }}
