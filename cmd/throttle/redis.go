package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// newRedis connects to REDIS_URL: a single Redis, Sentinel (?master_name=)
// or Cluster (?cluster=true, more nodes with &addr=). Context deadlines are
// honoured, so each call's budget bounds it. Commands are not retried unless
// the URL asks (max_retries=N): a script whose reply was lost may have
// counted its hits already, and counting them twice would reject traffic
// the limit admits. tlsFor, when not nil, makes the TLS configuration of a
// rediss:// URL for its host (REDIS_TLS_*), in place of go-redis's own.
// An error never shows the URL's password.
func newRedis(raw string, tlsFor func(serverName string) *tls.Config) (redis.UniversalClient, error) {
	c, err := parseRedis(raw, tlsFor)
	return c, scrub(err, urlSecrets(raw))
}

func parseRedis(raw string, tlsFor func(serverName string) *tls.Config) (redis.UniversalClient, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL it quotes
		}
		return nil, fmt.Errorf("REDIS_URL %s: %w", redactURL(raw), err)
	}
	q := u.Query()
	cluster := q.Get("cluster") == "true"
	q.Del("cluster")
	u.RawQuery = q.Encode()
	s := u.String()
	switch {
	case cluster:
		o, err := redis.ParseClusterURL(s)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL (cluster): %w", err)
		}
		o.ContextTimeoutEnabled = true
		setDefaults(q, &o.PoolSize, &o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.TLSConfig = withTLS(o.TLSConfig, tlsFor)
		// The counter store routes every request to its slot's master
		// itself, through a client per master made with these settings, and
		// follows one redirect at most (algorithms/redisstore/cluster.go): a dead
		// master's calls fail at once and only that master's circuit
		// opens. The ClusterClient's own routing serves the rest (the
		// first read of the slot table, RLQS usage); there too a
		// redirect is followed once, not chased around the Cluster while
		// the caller's deadline runs out (go-redis's default is 3, and on
		// a connection error it tries a random other node).
		if !q.Has("max_redirects") {
			o.MaxRedirects = 1
		}
		return redis.NewClusterClient(o), nil
	case q.Get("master_name") != "":
		o, err := redis.ParseFailoverURL(s)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL (sentinel): %w", err)
		}
		o.ContextTimeoutEnabled = true
		setDefaults(q, &o.PoolSize, &o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.TLSConfig = withTLS(o.TLSConfig, tlsFor)
		return redis.NewFailoverClient(o), nil
	default:
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		setDefaults(q, &o.PoolSize, &o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout)
		o.TLSConfig = withTLS(o.TLSConfig, tlsFor)
		return redis.NewClient(o), nil
	}
}

// withTLS is the TLS configuration of a client: go-redis's own (parsed of a
// rediss:// URL, nil for redis://) unless tlsFor makes one, for the same
// server name. Sentinel and Cluster clients use it for every node they
// reach (the counter store's clients per master copy it).
func withTLS(parsed *tls.Config, tlsFor func(string) *tls.Config) *tls.Config {
	if parsed == nil || tlsFor == nil {
		return parsed
	}
	return tlsFor(parsed.ServerName)
}

// setDefaults bounds dialling and I/O, and turns retries off, unless the
// URL (query q) set them. One dial attempt per connection: go-redis would
// otherwise retry a refused dial 5 times 100ms apart, so a dead Redis would
// look like a slow one and eat each call's budget. A pool of 128: Throttle
// uses a handful of connections (the coalescer's workers), but go-redis
// stops dialling after PoolSize failed dials and then tries once a second,
// which would hold the circuit open up to a second after Redis is back.
func setDefaults(q url.Values, poolSize, retries, dialRetries *int, dial, read, write *time.Duration) {
	if !q.Has("pool_size") {
		*poolSize = 128
	}
	if !q.Has("max_retries") {
		*retries = -1
	}
	if !q.Has("dialer_retries") {
		*dialRetries = 1
	}
	if *dial == 0 || *dial == 5*time.Second {
		*dial = time.Second
	}
	if *read == 0 || *read == 3*time.Second {
		*read = time.Second
	}
	if *write == 0 || *write == 3*time.Second {
		*write = time.Second
	}
}

// redisLog routes go-redis's own log lines (such as "failed to dial") into
// the JSON log, at most one a second: with Redis down every check would
// otherwise print one, and the metrics already count them.
type redisLog struct {
	log        *slog.Logger
	secrets    []string // never shown: REDIS_URL's password
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
