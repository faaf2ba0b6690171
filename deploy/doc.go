// Package deploy holds the monitoring configuration docker-compose.yml mounts:
// prometheus/prometheus.yml (scrapes Throttle's /metrics) and grafana/
// (data source, dashboard provider and the "Throttle" dashboard).
//
// Its test checks those files, the Dockerfiles and docker-compose.yml against
// each other and against Throttle's settings and metric names.
package deploy
