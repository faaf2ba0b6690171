package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/internal/idempotency"
	"github.com/throttle-rl/throttle/restapi"
)

// restAppsConfig is the settings of the REST API for apps (issue 31):
// CORS_ALLOWED_ORIGIN, LIST_RESPONSE_FORMAT, IDEMPOTENCY_TTL and the
// idempotency quotas (IDEMPOTENCY_MAX_*_PER_CLIENT).
type restAppsConfig struct {
	// CORSAllowedOrigins are the origins whose pages may call the API ("*":
	// any); none by default.
	CORSAllowedOrigins []string
	// ListObjects: /rules/list and /exemptions/list answer objects, as the
	// original service did (LIST_RESPONSE_FORMAT=object).
	ListObjects bool
	// IdempotencyTTL is how long a check's first reply is kept for its
	// Idempotency-Key.
	IdempotencyTTL time.Duration
	// IdempotencyQuota bounds each client's kept replies
	// (IDEMPOTENCY_MAX_RECORDS_PER_CLIENT, IDEMPOTENCY_MAX_BYTES_PER_CLIENT).
	IdempotencyQuota restapi.IdempotencyQuota
	// IdempotencyMemoryPercent: no reply is kept in a Redis this full
	// (IDEMPOTENCY_REDIS_MEMORY_PERCENT; 100: no budget).
	IdempotencyMemoryPercent int
	// Reservations bounds reservations (MAX_RESERVATION_TTL,
	// RESERVATION_MAX_FRACTION, RESERVATION_MAX_OUTSTANDING_PER_CLIENT).
	Reservations restapi.ReservationLimits
}

// parseOrigins reads CORS_ALLOWED_ORIGIN: comma-separated origins, a
// trailing '/' dropped; nil for none.
func parseOrigins(v string) ([]string, error) {
	var out []string
	var errs []error
	for _, o := range strings.Split(v, ",") {
		o = strings.TrimSuffix(strings.TrimSpace(o), "/")
		if o == "" {
			continue
		}
		if !isOrigin(o) {
			errs = append(errs, fmt.Errorf("%q is not an origin such as https://app.example.com (scheme and host, no path) or *", o))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// parseListFormat reads LIST_RESPONSE_FORMAT: true for object.
func parseListFormat(v string) (bool, error) {
	switch v {
	case "array", "object":
		return v == "object", nil
	}
	return false, fmt.Errorf("%q is not array or object", v)
}

// parseIdempotencyTTL reads IDEMPOTENCY_TTL: a duration of at least 1s.
func parseIdempotencyTTL(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%q is not a duration of at least 1s, such as 24h", v)
	}
	return d, nil
}

// isOrigin reports whether o is "*" or a browser origin: http(s), a host,
// an optional port, nothing else.
func isOrigin(o string) bool {
	if o == "*" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Path == "" &&
		u.RawQuery == "" && u.Fragment == "" && u.User == nil
}

// openIdempotency keeps idempotent checks' replies in Redis with REDIS_URL,
// so every replica answers a retry alike; without it the REST API keeps
// them in memory.
func (a *app) openIdempotency(context.Context) error {
	if a.cfg.Redis.URL == "" {
		return nil
	}
	rdb, err := newRedis(a.cfg.Redis, "REDIS_", a.redisTLS)
	if err != nil {
		return err
	}
	q := a.cfg.REST.IdempotencyQuota
	a.idempotency = idempotency.NewRedis(rdb, a.cfg.CacheKeyPrefix, idempotency.Quota{Records: q.Records, Bytes: q.Bytes, MemoryPercent: a.cfg.REST.IdempotencyMemoryPercent % 100})
	a.onClose(func() { rdb.Close() })
	return nil
}

// withRESTApps adds the REST API for apps' settings to d.
func (a *app) withRESTApps(d restapi.Deps) restapi.Deps {
	c := a.cfg.REST
	d.CORSAllowedOrigins, d.ListObjects, d.IdempotencyTTL = c.CORSAllowedOrigins, c.ListObjects, c.IdempotencyTTL
	d.IdempotencyQuota = c.IdempotencyQuota
	d.Reservations = c.Reservations
	if a.ledger != nil {
		d.Reservations.Ledger = a.ledger
	}
	if a.idempotency != nil {
		d.Idempotency = a.idempotency
	}
	return d
}
