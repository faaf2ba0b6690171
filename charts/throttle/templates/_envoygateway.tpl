{{/*
throttle.envoyGateway is the pod of envoyGateway.* (values.yaml) as YAML:
env, the settings Envoy Gateway gives its managed rate-limit Deployment in
its order (but LOG_LEVEL, which config.logLevel sets), with the Redis and
stats of the values; ports, the Throttle container's beyond http and grpc;
volumes (name, and secretName or configMap) with their mountPath. It fails,
naming the values, where other values would give a setting a second way or
break what Envoy Gateway's proxies expect.
*/}}
{{- define "throttle.envoyGateway" -}}
{{- $eg := .Values.envoyGateway }}
{{- $r := $eg.redis }}
{{- include "throttle.envoyGatewayConflicts" . }}
{{- $env := list
  (dict "name" "RUNTIME_ROOT" "value" "/data")
  (dict "name" "RUNTIME_SUBDIRECTORY" "value" "ratelimit")
  (dict "name" "RUNTIME_IGNOREDOTFILES" "value" "true")
  (dict "name" "RUNTIME_WATCH_ROOT" "value" "false")
  (dict "name" "USE_STATSD" "value" (ternary "true" "false" (eq $eg.stats "statsd"))) }}
{{- if eq $eg.stats "statsd" }}
{{- $env = append $env (dict "name" "STATSD_PORT" "value" "9125") }}
{{- end }}
{{- $env = concat $env (list
  (dict "name" "CONFIG_TYPE" "value" "GRPC_XDS_SOTW")
  (dict "name" "CONFIG_GRPC_XDS_SERVER_URL" "value" $eg.xds.serverURL)
  (dict "name" "CONFIG_GRPC_XDS_NODE_ID" "value" $eg.xds.nodeID)
  (dict "name" "GRPC_SERVER_USE_TLS" "value" "true")
  (dict "name" "GRPC_SERVER_TLS_CERT" "value" "/certs/tls.crt")
  (dict "name" "GRPC_SERVER_TLS_KEY" "value" "/certs/tls.key")
  (dict "name" "GRPC_SERVER_TLS_CA_CERT" "value" "/certs/ca.crt")
  (dict "name" "CONFIG_GRPC_XDS_SERVER_USE_TLS" "value" "true")
  (dict "name" "CONFIG_GRPC_XDS_CLIENT_TLS_CERT" "value" "/certs/tls.crt")
  (dict "name" "CONFIG_GRPC_XDS_CLIENT_TLS_KEY" "value" "/certs/tls.key")
  (dict "name" "CONFIG_GRPC_XDS_SERVER_TLS_CACERT" "value" "/certs/ca.crt")
  (dict "name" "FORCE_START_WITHOUT_INITIAL_CONFIG" "value" "true")) }}
{{- if or $r.url $r.existingSecret.name }}
{{- $env = append $env (dict "name" "REDIS_SOCKET_TYPE" "value" "tcp") }}
{{- if $r.url }}
{{- $env = append $env (dict "name" "REDIS_URL" "value" $r.url) }}
{{- else }}
{{- $env = append $env (dict "name" "REDIS_URL" "valueFrom" (dict "secretKeyRef" (dict "name" $r.existingSecret.name "key" $r.existingSecret.key))) }}
{{- end }}
{{- if $r.auth.existingSecret.name }}
{{- $env = append $env (dict "name" "REDIS_AUTH" "valueFrom" (dict "secretKeyRef" (dict "name" $r.auth.existingSecret.name "key" $r.auth.existingSecret.key))) }}
{{- end }}
{{- end }}
{{- $ports := list }}
{{- $volumes := list (dict "name" "certs" "secretName" $eg.certsSecret "mountPath" "/certs") }}
{{- if eq $eg.stats "prometheus" }}
{{- /* Envoy Gateway's PROMETHEUS_MAPPER_YAML, which the chart leaves out,
maps response_time with no scale: its ratelimit_service_response_time_seconds
counts milliseconds, and so does Throttle's default mapping with
PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS. */}}
{{- $env = concat $env (list (dict "name" "USE_PROMETHEUS" "value" "true") (dict "name" "PROMETHEUS_ADDR" "value" ":19001") (dict "name" "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS" "value" "true")) }}
{{- $ports = append $ports (dict "name" "metrics" "containerPort" 19001 "protocol" "TCP") }}
{{- end }}
{{- toYaml (dict "env" $env "ports" $ports "volumes" $volumes) }}
{{- end }}

{{/* throttle.envoyGatewayConflicts fails on values that envoyGateway.enabled replaces or cannot serve. */}}
{{- define "throttle.envoyGatewayConflicts" -}}
{{- $eg := .Values.envoyGateway }}
{{- $r := $eg.redis }}
{{- if or .Values.redis.url .Values.redis.addresses .Values.redis.existingSecret.name }}
{{- fail "envoyGateway.enabled takes Redis from envoyGateway.redis (REDIS_URL as host:port, the reference's syntax, as Envoy Gateway gives it): leave redis.url, redis.addresses and redis.existingSecret empty" }}
{{- end }}
{{- if and $r.url $r.existingSecret.name }}
{{- fail "envoyGateway.redis.url and envoyGateway.redis.existingSecret are both set: give REDIS_URL one way" }}
{{- end }}
{{- if and $r.auth.existingSecret.name (not (or $r.url $r.existingSecret.name)) }}
{{- fail "envoyGateway.redis.auth is set but there is no Redis: set envoyGateway.redis.url (host:port) or envoyGateway.redis.existingSecret" }}
{{- end }}
{{- if or .Values.descriptors.files .Values.descriptors.existingConfigMap }}
{{- fail "envoyGateway.enabled takes the limits from Envoy Gateway's xDS server (envoyGateway.xds): leave descriptors.files and descriptors.existingConfigMap empty" }}
{{- end }}
{{- $t := .Values.tls }}
{{- if or $t.grpc.secretName $t.grpc.clientCA.secretName $t.grpc.clientSANs $t.http.secretName $t.http.clientCA.secretName $t.redis.ca.secretName $t.redis.clientSecretName $t.redis.skipHostnameVerification }}
{{- fail "envoyGateway.enabled serves gRPC over TLS with envoyGateway.certsSecret, as Envoy Gateway does, and Envoy Gateway probes plain HTTP: leave tls.* empty" }}
{{- end }}
{{- if or (ne (int .Values.containerPorts.http) 8080) (ne (int .Values.containerPorts.grpc) 8081) }}
{{- fail (printf "envoyGateway.enabled needs containerPorts http 8080 and grpc 8081 (the reference's ports, which Envoy Gateway's proxies and probes use), not %v and %v" .Values.containerPorts.http .Values.containerPorts.grpc) }}
{{- end }}
{{- if .Values.istio.envoyFilter.enabled }}
{{- fail "envoyGateway.enabled and istio.envoyFilter.enabled are both set: Envoy Gateway's proxies call the gRPC port over TLS, which the EnvoyFilter's cluster does not speak" }}
{{- end }}
{{- if .Values.config.forceStartWithoutInitialConfig }}
{{- fail "config.forceStartWithoutInitialConfig: envoyGateway.enabled sets FORCE_START_WITHOUT_INITIAL_CONFIG=true itself, as Envoy Gateway does" }}
{{- end }}
{{- end }}

{{/* throttle.envoyGatewayUnused fails when envoyGateway.redis is set but envoyGateway.enabled is not. */}}
{{- define "throttle.envoyGatewayUnused" -}}
{{- $r := .Values.envoyGateway.redis }}
{{- if and (not .Values.envoyGateway.enabled) (or $r.url $r.existingSecret.name $r.auth.existingSecret.name) }}
{{- fail "envoyGateway.redis is set but envoyGateway.enabled is false: without it, give Redis in redis.*" }}
{{- end }}
{{- end }}
