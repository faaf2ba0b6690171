package restapi

import (
	"context"
	"net/http"
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
func handleReady(db *store.DB, limiter func(context.Context) ([]string, error), mode algorithms.FailureMode) http.Handler {
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
// 500 ms: "ok"; else, while the failure policy decides in its place,
// "degraded: A, B down" (FAILURE_MODE open or local: the replica still
// serves decisions, by policy) or "unavailable: A, B down" (closed: every
// decision would be a refusal), naming what does not answer.
func checkLimiter(ctx context.Context, ready func(context.Context) ([]string, error), mode algorithms.FailureMode) string {
	lctx, cancel := context.WithTimeout(ctx, limiterReadyTimeout)
	down, err := ready(lctx)
	cancel()
	if err == nil {
		return readyOK
	}
	state := readyDegraded
	if mode == algorithms.FailClosed {
		state = readyUnavailable
	}
	logFrom(ctx).Warn("readiness: counter backend", "err", err, "failure_mode", string(mode), "state", state)
	if len(down) == 0 {
		return state
	}
	return state + ": " + strings.Join(down, ", ") + " down"
}
