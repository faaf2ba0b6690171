package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/refstats"
)

// statsSinkConfig is the settings of the reference service's stats (package
// refstats), with its names, syntax and defaults, except USE_STATSD's.
type statsSinkConfig struct {
	// One sink at most, as the reference allows; none: off.
	UseStatsd, UseDogStatsd, UsePrometheus bool
	// Disable turns every sink off (DISABLE_STATS), whatever the others say.
	Disable        bool
	StatsdHost     string
	StatsdPort     int
	StatsdProtocol string // tcp or udp: gostats' STATSD_PROTOCOL
	FlushInterval  time.Duration
	ExtraTags      map[string]string
	// MogrifierNames are USE_DOG_STATSD_MOGRIFIERS; Mogrifiers, what their
	// DOG_STATSD_MOGRIFIER_<NAME>_* variables say (readEnv).
	MogrifierNames []string
	Mogrifiers     []refstats.Mogrifier
	PrometheusAddr string
	PrometheusPath string
	// PrometheusMapperYAML is a statsd_exporter mapping file that replaces
	// the default mapping.
	PrometheusMapperYAML string
	// PrometheusResponseTimeMS keeps the default mapping's response time
	// in milliseconds.
	PrometheusResponseTimeMS bool
}

// The sinks of statsSinkConfig.sink.
const (
	sinkStatsd     = "statsd"
	sinkDogStatsd  = "dogstatsd"
	sinkPrometheus = "prometheus"
)

// statsSinkSettings are the reference service's stats settings (refstats.go,
// package refstats). USE_STATSD is off by default here, where the
// reference's is on: it would send to a localhost:8125 nothing listens on in
// most pods (the reference's own deployments set it either way).
var statsSinkSettings = []setting{
	{env: "USE_STATSD", flag: "use-statsd", def: "false", ref: upstreamDefault("true"),
		usage: "send the reference service's stats (envoyproxy/ratelimit's names, such as " +
			"ratelimit.service.rate_limit.DOMAIN.KEY.total_hits) to statsd at STATSD_HOST:STATSD_PORT every " +
			"STATS_FLUSH_INTERVAL (the reference's default is true)",
		set: func(c *config, v string) (err error) { c.Stats.UseStatsd, err = parseBool(v); return }},
	{env: "STATSD_HOST", flag: "statsd-host", def: "localhost", ref: upstreamDefault("localhost"),
		usage: "host of statsd (USE_STATSD) or of the DogStatsD agent (USE_DOG_STATSD)",
		set:   func(c *config, v string) error { c.Stats.StatsdHost = v; return nil }},
	{env: "STATSD_PORT", flag: "statsd-port", def: "8125", ref: upstreamDefault("8125"),
		usage: "port of statsd or of the DogStatsD agent",
		set:   func(c *config, v string) (err error) { c.Stats.StatsdPort, err = parseInt(v); return }},
	{env: "STATSD_PROTOCOL", flag: "statsd-protocol", def: "tcp",
		usage: "tcp or udp: how USE_STATSD reaches statsd (gostats' setting, which the reference reads too); DogStatsD is always udp",
		set:   func(c *config, v string) (err error) { c.Stats.StatsdProtocol, err = parseStatsdProtocol(v); return }},
	{env: "STATS_FLUSH_INTERVAL", flag: "stats-flush-interval", def: "10s", ref: upstreamDefault("10s"),
		usage: "how often the reference stats' counters are sent (a response time is sent at once), and once more at shutdown",
		set:   func(c *config, v string) (err error) { c.Stats.FlushInterval, err = parseDuration(v); return }},
	{env: "EXTRA_TAGS", flag: "extra-tags", ref: upstreamDefault(""),
		usage: "tags of every reference stat: key:value,key:value (in the name on statsd, NAME.__key=value; tags on DogStatsD)",
		set:   func(c *config, v string) (err error) { c.Stats.ExtraTags, err = parseTagMap(v); return }},
	{env: "DISABLE_STATS", flag: "disable-stats", def: "false", ref: upstreamDefault("false"),
		usage: "send none of the reference stats, whatever USE_STATSD, USE_DOG_STATSD and USE_PROMETHEUS say (Throttle's own " +
			"/metrics stays)",
		set: func(c *config, v string) (err error) { c.Stats.Disable, err = parseBool(v); return }},
	{env: "USE_DOG_STATSD", flag: "use-dog-statsd", def: "false", ref: upstreamDefault("false"),
		usage: "send the reference stats to a DogStatsD agent at STATSD_HOST:STATSD_PORT (udp), EXTRA_TAGS as tags",
		set:   func(c *config, v string) (err error) { c.Stats.UseDogStatsd, err = parseBool(v); return }},
	{env: "USE_DOG_STATSD_MOGRIFIERS", flag: "use-dog-statsd-mogrifiers", ref: upstreamDefault(""),
		usage: "comma-separated names of DogStatsD mogrifiers, each set by DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and " +
			"_TAGS: the first whose pattern matches a stat's name renames it and adds tags",
		set: func(c *config, v string) error { c.Stats.MogrifierNames = parseStringList(v); return nil }},
	{env: "USE_PROMETHEUS", flag: "use-prometheus", def: "false", ref: upstreamDefault("false"),
		usage: "serve the reference stats as Prometheus metrics on PROMETHEUS_ADDR (such as " +
			"ratelimit_service_rate_limit_total_hits{domain,key1}), mapped as statsd_exporter maps them",
		set: func(c *config, v string) (err error) { c.Stats.UsePrometheus, err = parseBool(v); return }},
	{env: "PROMETHEUS_ADDR", flag: "prometheus-addr", def: ":9090", ref: upstreamDefault(":9090"),
		usage: "host:port of the USE_PROMETHEUS listener (plain HTTP), apart from PORT's /metrics",
		set:   func(c *config, v string) error { c.Stats.PrometheusAddr = v; return nil }},
	{env: "PROMETHEUS_PATH", flag: "prometheus-path", def: "/metrics", ref: upstreamDefault("/metrics"),
		usage: "path of the USE_PROMETHEUS metrics on PROMETHEUS_ADDR",
		set:   func(c *config, v string) error { c.Stats.PrometheusPath = v; return nil }},
	{env: "PROMETHEUS_MAPPER_YAML", flag: "prometheus-mapper-yaml", ref: upstreamDefault(""),
		usage: "statsd_exporter mapping file that replaces the default mapping of the reference stats to metrics; one that " +
			"cannot be read or does not load is logged, and the default mapping serves",
		set: func(c *config, v string) error { c.Stats.PrometheusMapperYAML = v; return nil }},
	{env: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", flag: "prometheus-response-time-as-milliseconds", def: "false", ref: upstreamDefault("false"),
		usage: "with the default mapping: ratelimit_service_response_time_seconds in milliseconds, as its name does not say",
		set:   func(c *config, v string) (err error) { c.Stats.PrometheusResponseTimeMS, err = parseBool(v); return }},
}

// sink is the sink the settings choose: sinkStatsd, sinkDogStatsd,
// sinkPrometheus, or "" (none, or DISABLE_STATS).
func (s *statsSinkConfig) sink() string {
	switch {
	case s.Disable:
		return ""
	case s.UseDogStatsd:
		return sinkDogStatsd
	case s.UseStatsd:
		return sinkStatsd
	case s.UsePrometheus:
		return sinkPrometheus
	}
	return ""
}

// validate checks the stats settings against each other and the ports of
// c.
func (s *statsSinkConfig) validate(c *config) []error {
	if s.Disable {
		return nil
	}
	var errs []error
	if n := countTrue(s.UseStatsd, s.UseDogStatsd, s.UsePrometheus); n > 1 {
		errs = append(errs, errors.New("USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS: more than one is true; set one of them (the reference refuses the same)"))
	}
	switch s.sink() {
	case sinkStatsd, sinkDogStatsd:
		if s.StatsdHost == "" {
			errs = append(errs, errors.New("STATSD_HOST: empty"))
		}
		if s.StatsdPort < 1 || s.StatsdPort > 65535 {
			errs = append(errs, fmt.Errorf("STATSD_PORT: %d is not a port (1-65535)", s.StatsdPort))
		}
	case sinkPrometheus:
		errs = append(errs, s.validatePrometheus(c)...)
	}
	return errs
}

// validatePrometheus checks PROMETHEUS_ADDR and PROMETHEUS_PATH: a
// host:port no other listener of c takes.
func (s *statsSinkConfig) validatePrometheus(c *config) []error {
	var errs []error
	if !strings.HasPrefix(s.PrometheusPath, "/") {
		errs = append(errs, fmt.Errorf("PROMETHEUS_PATH: %q does not start with /", s.PrometheusPath))
	}
	host, port, err := splitPort(s.PrometheusAddr)
	if err != nil {
		return append(errs, fmt.Errorf("PROMETHEUS_ADDR: %w", err))
	}
	type listener struct {
		name, host string
		port       int
	}
	others := []listener{{"PORT", cmp.Or(c.Listen.HTTPHost, c.BindAddress), c.Port}, {"GRPC_PORT", cmp.Or(c.Listen.GRPCHost, c.BindAddress), c.GRPCPort}}
	if dh, dp, err := splitPort(c.debugAddress()); c.debugAddress() != "" && err == nil {
		others = append(others, listener{"DEBUG_ADDRESS", dh, dp})
	}
	for _, o := range others {
		if port != 0 && port == o.port && hostsOverlap(host, o.host) {
			errs = append(errs, fmt.Errorf("PROMETHEUS_ADDR: %s is %s's address too; give the reference stats' listener a port of its own", s.PrometheusAddr, o.name))
		}
	}
	return errs
}

// splitPort splits host:port; the port must be a number 0-65535.
func splitPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port, such as :9090", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: %q is not a port", addr, p)
	}
	return host, port, nil
}

// hostsOverlap reports whether listeners on hosts a and b could take the
// same address: either is every interface, or they are the same.
func hostsOverlap(a, b string) bool {
	all := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return all(a) || all(b) || a == b
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// readEnv reads what the stats settings leave to other variables, as the
// reference's libraries read them: each USE_DOG_STATSD_MOGRIFIERS name's
// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS; and, for USE_STATSD,
// the variables gostats parses itself (and panics on): a bad one is refused
// here, by name.
func (s *statsSinkConfig) readEnv(getenv func(string) string) error {
	var errs []error
	switch s.sink() {
	case sinkDogStatsd:
		for _, name := range s.MogrifierNames {
			m, err := readMogrifier(name, getenv)
			if err != nil {
				errs = append(errs, fmt.Errorf("USE_DOG_STATSD_MOGRIFIERS: mogrifier %q: %w", name, err))
				continue
			}
			s.Mogrifiers = append(s.Mogrifiers, m)
		}
	case sinkStatsd:
		for _, v := range []struct {
			name  string
			parse func(string) error
		}{
			{"USE_STATSD", func(v string) error { _, err := strconv.ParseBool(v); return err }},
			{"STATSD_PORT", func(v string) error { _, err := strconv.Atoi(v); return err }},
			{"GOSTATS_FLUSH_INTERVAL_SECONDS", func(v string) error { _, err := strconv.Atoi(v); return err }},
			{"GOSTATS_LOGGING_SINK_DISABLED", func(v string) error { _, err := strconv.ParseBool(v); return err }},
		} {
			if val := getenv(v.name); val != "" && v.parse(val) != nil {
				errs = append(errs, fmt.Errorf("%s: the environment's %q does not parse, and the statsd library reads it itself", v.name, val))
			}
		}
	}
	return errors.Join(errs...)
}

// readMogrifier reads the mogrifier name from DOG_STATSD_MOGRIFIER_<NAME>_*
// (NAME in upper case, as the reference's envconfig looks it up).
func readMogrifier(name string, getenv func(string) string) (refstats.Mogrifier, error) {
	prefix := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name) + "_"
	tags, err := parseTagMap(getenv(prefix + "TAGS"))
	if err != nil {
		return refstats.Mogrifier{}, fmt.Errorf("%sTAGS: %w", prefix, err)
	}
	m, err := refstats.NewMogrifier(getenv(prefix+"PATTERN"), getenv(prefix+"NAME"), tags)
	if err != nil {
		return refstats.Mogrifier{}, fmt.Errorf("%s*: %w", prefix, err)
	}
	return m, nil
}

// parseTagMap reads key:value,key:value as the reference's settings library
// (envconfig) reads a map: no space trimmed, each item exactly one ':'.
func parseTagMap(v string) (map[string]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		kv := strings.Split(item, ":")
		if len(kv) != 2 {
			return nil, fmt.Errorf("%q is not key:value", item)
		}
		m[kv[0]] = kv[1]
	}
	return m, nil
}

// parseStringList reads a,b,c as envconfig reads a list: no space trimmed.
func parseStringList(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	return strings.Split(v, ",")
}

func parseStatsdProtocol(v string) (string, error) {
	switch v {
	case "tcp", "udp":
		return v, nil
	}
	return "", fmt.Errorf("%q is not tcp or udp", v)
}
