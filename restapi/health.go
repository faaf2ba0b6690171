package restapi

import (
	"context"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
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

// handleReady answers 200 when the database answers a ping and the limiter a
// read-only check (hits 0), each within 2 seconds; else 503 (readiness).
// Causes are logged, not shown.
func handleReady(db *store.DB, limiter algorithms.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		reply := readyReply{Status: "ready", Checks: map[string]string{"database": "ok", "limiter": "ok"}}
		status := http.StatusOK
		if err := db.Ping(ctx); err != nil {
			logFrom(ctx).Warn("readiness: database", "err", err)
			reply.Checks["database"] = "unavailable"
			status = http.StatusServiceUnavailable
		}
		_, err := limiter.Check(ctx, []algorithms.Request{{
			Key:   algorithms.Key{Scope: "_ready", Identifier: "probe"},
			Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second},
			Hits:  0,
		}})
		if err != nil {
			logFrom(ctx).Warn("readiness: limiter", "err", err)
			reply.Checks["limiter"] = "unavailable"
			status = http.StatusServiceUnavailable
		}
		if status != http.StatusOK {
			reply.Status = "unavailable"
		}
		encode(w, r, status, reply)
	})
}
