package restapi

import (
	"context"
	"net/http"
	"time"
)

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
