package restapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// How long readiness waits for each check.
const (
	databaseReadyTimeout = 2 * time.Second
	limiterReadyTimeout  = 500 * time.Millisecond
)

// handleHealth answers while the process serves HTTP (liveness).
func handleHealth() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encode(w, r, http.StatusOK, map[string]string{"status": "ok"})
	})
}

type readyReply struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// The states of readiness and of its checks.
const (
	readyOK          = "ok"
	readyReady       = "ready"
	readyDegraded    = "degraded"
	readyUnavailable = "unavailable"
)

// handleReady is readiness: the database answers a ping within 2 seconds,
// and the counter backend (limiter; nil: memory, always ready) is asked
// itself within 500 ms, never through a decision (checkLimiter). A database
// that does not answer, or a limiter "unavailable", is 503 with status
// "unavailable"; a limiter "degraded" is 200 with status "degraded". Causes
// are logged; the reply names only what is down.
func handleReady(db *store.DB, limiter func(context.Context) map[string]error, mode algorithms.FailureMode) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		reply := readyReply{Status: readyReady, Checks: map[string]string{"database": readyOK, "limiter": readyOK}}
		dctx, cancel := context.WithTimeout(ctx, databaseReadyTimeout)
		err := db.Ping(dctx)
		cancel()
		if err != nil {
			logFrom(ctx).Warn("readiness: database", "err", err)
			reply.Checks["database"] = readyUnavailable
		}
		if limiter != nil {
			reply.Checks["limiter"] = checkLimiter(ctx, limiter, mode)
		}
		status := http.StatusOK
		for _, c := range reply.Checks {
			switch {
			case strings.HasPrefix(c, readyUnavailable):
				reply.Status, status = readyUnavailable, http.StatusServiceUnavailable
			case strings.HasPrefix(c, readyDegraded) && status == http.StatusOK:
				reply.Status = readyDegraded
			}
		}
		encode(w, r, status, reply)
	})
}

// checkLimiter asks the counter backend itself whether it answers, within
// 500 ms: "ok" when every master does. Else it names those that do not,
// after the state: "unavailable: A down" when none answers and FAILURE_MODE
// is closed (every decision would be a refusal); otherwise "degraded: A, B
// down" (the replica still serves decisions: by policy under open and
// local, and on a Cluster with some masters up, from Redis for their keys).
func checkLimiter(ctx context.Context, ready func(context.Context) map[string]error, mode algorithms.FailureMode) string {
	lctx, cancel := context.WithTimeout(ctx, limiterReadyTimeout)
	masters := ready(lctx)
	cancel()
	var down []string
	for name, err := range masters {
		if err != nil {
			down = append(down, name)
		}
	}
	if len(down) == 0 {
		return readyOK
	}
	slices.Sort(down)
	state := readyDegraded
	if mode == algorithms.FailClosed && len(down) == len(masters) {
		state = readyUnavailable
	}
	for _, name := range down {
		logFrom(ctx).Warn("readiness: counter backend", "err", masters[name], "failure_mode", string(mode), "state", state)
	}
	return state + ": " + strings.Join(down, ", ") + " down"
}

// Healthcheck configures GET /healthcheck, the health path of Envoy's
// reference rate-limit service, which its deployments probe (Envoy
// Gateway's readiness probe among them): 200 "OK" when every part asked is
// healthy, else 500 with the part that is not, as text.
type Healthcheck struct {
	// ConfigLoaded, when set, must report that a descriptor configuration
	// has loaded (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED). Default nil:
	// healthy without one, as the reference by default.
	ConfigLoaded func() bool
	// Redis, when set, asks the counter backend: every master must answer
	// within 500 ms (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION). Default nil:
	// Redis is not asked; FAILURE_MODE decides while it is down.
	Redis func(context.Context) map[string]error
}

// healthcheckRedisTimeout bounds the Redis question of /healthcheck.
const healthcheckRedisTimeout = 500 * time.Millisecond

// handleHealthcheck answers GET /healthcheck as h configures it.
func handleHealthcheck(h Healthcheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if h.ConfigLoaded != nil && !h.ConfigLoaded() {
			http.Error(w, "no rate limit configuration loaded", http.StatusInternalServerError)
			return
		}
		if h.Redis != nil {
			ctx, cancel := context.WithTimeout(r.Context(), healthcheckRedisTimeout)
			masters := h.Redis(ctx)
			cancel()
			for name, err := range masters {
				if err != nil {
					logFrom(r.Context()).Warn("healthcheck: redis", "master", name, "err", err)
					http.Error(w, "redis unavailable", http.StatusInternalServerError)
					return
				}
			}
		}
		w.Write([]byte("OK"))
	})
}
