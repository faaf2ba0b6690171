package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The kinds of Redis deployment (REDIS_TYPE, in lower case).
const (
	redisSingle   = "single"
	redisSentinel = "sentinel"
	redisCluster  = "cluster"
)

// redisTarget is one Redis deployment as its settings describe it,
// whichever form they came in (a redis:// URL, or the reference service's
// REDIS_URL and REDIS_TYPE): the options of its client, in one value, and
// the kind of client it needs.
type redisTarget struct {
	kind    string // redisSingle, redisSentinel or redisCluster
	network string // a single Redis's: tcp, or unix for a socket path
	opts    redis.UniversalOptions
	// given are the options the settings set (by go-redis's URL names:
	// pool_size, dial_timeout, …); setDefaults fills in the others.
	given map[string]bool
}

// newRedis connects to the Redis deployment rc describes (REDIS_* when
// prefix is "REDIS_", REDIS_PERSECOND_* for "REDIS_PERSECOND_"): a single
// Redis, Sentinel or Cluster. Context deadlines are honoured, so each
// call's budget bounds it. Commands are not retried unless the URL asks
// (max_retries=N): a script whose reply was lost may have counted its hits
// already, and counting them twice would reject traffic the limit admits.
// tlsFor, when not nil, makes the TLS configuration for a host
// (REDIS_TLS_*), in place of go-redis's own. An error never shows a
// password.
func newRedis(rc redisConfig, prefix string, tlsFor func(serverName string) *tls.Config) (redis.UniversalClient, error) {
	t, err := parseRedisTarget(rc, prefix)
	if err != nil {
		return nil, scrub(err, rc.secrets())
	}
	t.opts.TLSConfig = withTLS(t.opts.TLSConfig, tlsFor)
	if prefix == "GLOBAL_REDIS_" {
		// A region away, every command of a new connection's handshake
		// is a round trip: leave out CLIENT SETINFO's.
		t.opts.DisableIdentity = true
	}
	return t.client(), nil
}

// parseRedisTarget reads rc: REDIS_URL as a redis:// or rediss:// URL
// (redisURLTarget), else in the reference service's forms (host:port, a
// socket path, mymaster,host:port… for Sentinel, host:port,… for Cluster);
// then the settings that apply to both, and Throttle's defaults for what
// neither set. Its errors name the settings (prefix + name) and never show
// a password.
func parseRedisTarget(rc redisConfig, prefix string) (*redisTarget, error) {
	var t *redisTarget
	var err error
	if strings.Contains(rc.URL, "://") {
		t, err = redisURLTarget(rc, prefix)
	} else {
		t, err = redisListTarget(rc, prefix)
	}
	if err != nil {
		return nil, err
	}
	if rc.PoolSize > 0 {
		t.opts.PoolSize = rc.PoolSize
		t.given["pool_size"] = true
	}
	if rc.Timeout > 0 {
		t.opts.DialTimeout, t.opts.ReadTimeout, t.opts.WriteTimeout = rc.Timeout, rc.Timeout, rc.Timeout
		t.given["dial_timeout"], t.given["read_timeout"], t.given["write_timeout"] = true, true, true
	}
	if rc.Auth != "" {
		user, password := splitAuth(rc.Auth)
		t.opts.Password = password
		if user != "" { // else a redis:// URL's user stays
			t.opts.Username = user
		}
	}
	if rc.SentinelAuth != "" && t.kind == redisSentinel {
		user, password := splitAuth(rc.SentinelAuth)
		t.opts.SentinelPassword = password
		if user != "" {
			t.opts.SentinelUsername = user
		}
	}
	t.setDefaults()
	return t, nil
}

// splitAuth reads REDIS_AUTH as the reference does: user:password, or a
// password alone (the first ':' separates).
func splitAuth(auth string) (user, password string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// redisListTarget reads REDIS_URL in the reference service's forms, by
// REDIS_TYPE (single when not given): host:port or a socket's path, with
// REDIS_SOCKET_TYPE or inferred (a path holds a '/'); mymaster,host:port…
// (Sentinel: the master's name, then the Sentinels); host:port,… (Cluster:
// seed nodes). Sentinel and Cluster are reached over TCP whatever
// REDIS_SOCKET_TYPE says, as in the reference.
func redisListTarget(rc redisConfig, prefix string) (*redisTarget, error) {
	t := &redisTarget{kind: rc.Type, given: map[string]bool{}}
	parts := strings.Split(rc.URL, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	addrs := parts
	switch t.kind {
	case "", redisSingle:
		if len(parts) > 1 {
			return nil, fmt.Errorf("%sURL lists %d addresses, but %sTYPE is %s: set %sTYPE=cluster (host:port,host:port…) or %sTYPE=sentinel (mymaster,host:port…)",
				prefix, len(parts), prefix, or(rc.Type, "not given (single)"), prefix, prefix)
		}
		t.kind = redisSingle
		return t, t.singleAddr(rc, prefix)
	case redisSentinel:
		if len(parts) < 2 || parts[0] == "" {
			return nil, fmt.Errorf("%sTYPE=sentinel: %sURL must be the master's name, then its Sentinels: mymaster,host:port[,host:port…]", prefix, prefix)
		}
		t.opts.MasterName, addrs = parts[0], parts[1:]
	}
	for _, a := range addrs {
		if err := checkHostPort(a); err != nil {
			return nil, fmt.Errorf("%sURL: %w", prefix, err)
		}
	}
	t.network, t.opts.Addrs = "tcp", addrs
	if rc.TLS {
		host, _, _ := net.SplitHostPort(addrs[0])
		t.opts.TLSConfig = redisTLSConfig(host)
	}
	return t, nil
}

// singleAddr sets a single Redis's network and address: a unix socket's
// path, or host:port over TCP.
func (t *redisTarget) singleAddr(rc redisConfig, prefix string) error {
	addr := rc.URL
	t.network = rc.SocketType
	if t.network == "" {
		t.network = "tcp"
		if strings.Contains(addr, "/") {
			t.network = "unix"
		}
	}
	if t.network != "unix" {
		if err := checkHostPort(addr); err != nil {
			return fmt.Errorf("%sURL: %w (for a unix socket give its path, such as /var/run/redis/redis.sock, or set %sSOCKET_TYPE=unix)", prefix, err, prefix)
		}
	}
	t.opts.Addrs = []string{addr}
	if rc.TLS {
		host, _, _ := net.SplitHostPort(addr)
		t.opts.TLSConfig = redisTLSConfig(host)
	}
	return nil
}

// checkHostPort checks that addr is host:port.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	return nil
}

// redisTLSConfig is the TLS configuration of REDIS_TLS=true for host, as
// go-redis makes one for a rediss:// URL (REDIS_TLS_* replace it: withTLS).
func redisTLSConfig(host string) *tls.Config {
	return &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// The connections' defaults, unless the settings or the URL give them
// (setDefaults says why).
const (
	defaultPoolSize     = 128
	defaultRedisTimeout = time.Second
)

// setDefaults bounds dialling and I/O, and turns retries off, unless the
// settings set them. One dial attempt per connection: go-redis would
// otherwise retry a refused dial 5 times 100ms apart, so a dead Redis would
// look like a slow one and eat each call's budget. A pool of 128: Throttle
// uses a handful of connections (the coalescer's workers), but go-redis
// stops dialling after PoolSize failed dials and then tries once a second,
// which would hold the circuit open up to a second after Redis is back.
// On a Cluster, a redirect is followed once (see client).
func (t *redisTarget) setDefaults() {
	o := &t.opts
	o.ContextTimeoutEnabled = true
	if !t.given["pool_size"] {
		o.PoolSize = defaultPoolSize
	}
	if !t.given["max_retries"] {
		o.MaxRetries = -1
	}
	if !t.given["dialer_retries"] {
		o.DialerRetries = 1
	}
	for name, d := range map[string]*time.Duration{"dial_timeout": &o.DialTimeout, "read_timeout": &o.ReadTimeout, "write_timeout": &o.WriteTimeout} {
		if !t.given[name] || *d == 0 {
			*d = defaultRedisTimeout
		}
	}
	if t.kind == redisCluster && !t.given["max_redirects"] {
		o.MaxRedirects = 1
	}
}

// client makes the target's client. On a Cluster, the counter store
// routes every request to its slot's master itself, through a client per
// master made with these options, and follows one redirect at most
// (algorithms/redisstore/cluster.go): a dead master's calls fail at once
// and only that master's circuit opens. The ClusterClient's own routing
// serves the rest (the first read of the slot table, RLQS usage); there too
// a redirect is followed once, not chased around the Cluster while the
// caller's deadline runs out (go-redis's default is 3, and on a connection
// error it tries a random other node).
func (t *redisTarget) client() redis.UniversalClient {
	switch t.kind {
	case redisCluster:
		return redis.NewClusterClient(t.opts.Cluster())
	case redisSentinel:
		return redis.NewFailoverClient(t.opts.Failover())
	}
	o := t.opts.Simple()
	o.Network = t.network
	return redis.NewClient(o)
}

// withTLS is the TLS configuration of a client: go-redis's own (parsed of a
// rediss:// URL, made for REDIS_TLS; nil without TLS) unless tlsFor makes
// one, for the same server name. Sentinel and Cluster clients use it for
// every node they reach (the counter store's clients per master copy it).
func withTLS(parsed *tls.Config, tlsFor func(string) *tls.Config) *tls.Config {
	if parsed == nil || tlsFor == nil {
		return parsed
	}
	return tlsFor(parsed.ServerName)
}

// redisLog routes go-redis's own log lines (such as "failed to dial") into
// the JSON log, at most one a second: with Redis down every check would
// otherwise print one, and the metrics already count them.
type redisLog struct {
	log        *slog.Logger
	secrets    []string // never shown: the Redis passwords
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < time.Second {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.log.WarnContext(ctx, "redis client", "detail", scrubString(fmt.Sprintf(format, v...), l.secrets), "suppressed_since_last", suppressed)
}
