// Package redisstore is the Redis counter store of Throttle's engine: an
// algorithms.Store whose state lives in Redis (single, Sentinel or Cluster),
// so every replica enforces one shared limit, and the Guard that keeps
// answering when Redis does not.
//
// A batch of requests meets these stages, in order, one file each:
//
//  1. overlimit/: overlimit.Cache answers what Redis has just rejected, until it could be admitted (Envoy path);
//     a package of its own, as it wraps any algorithms.Store.
//  2. split.go: Split sends one-second limits to the REDIS_PERSECOND Redis, the rest to the main one.
//  3. guard.go: Guard.Check validates the batch and sends it down its checkPath (checkpath.go) behind the breakers (breaker.go).
//  4. approxcheck.go: checkPath.decide sends approximate requests to the table (approx.go), the rest to Redis (checkPath.exact).
//     approxdecide.go decides within this replica's lease; approxask.go asks Redis at once when it runs out.
//  5. dispatch.go: router.dispatch splits the batch by master and follows a redirect once (router.go, cluster.go, keys.go).
//  6. checkpath.go: checkPath.onMaster is each master's one call: when guarded, Guard.onMaster's breaker and failure policy.
//  7. master.go: Store.onMaster decides a part on its master (master), in a span when tracing (trace.go).
//  8. coalesce.go: the coalescer merges concurrent callers' batches into one call per master.
//  9. store.go: decide sends count-first windows to plain.go, the rest to script.go, at once.
//  10. plain.go: SET NX or INCRBY per request (known.go, clock.go), then refund.lua takes back what must not count.
//  11. script.go: batch.lua (with prelude.lua and an algorithm per file: fixed_window.lua, sliding_window.lua,
//     token_bucket.lua, gcra.lua), run as a function or a script (functions.go).
//  12. algorithms.DecideFound turns what Redis found into decisions, as the memory store does.
//  13. clear.go: refundVoided takes back what masters counted for a group another voided; Clear and Reset delete
//     state (clear.lua, reset.lua, each behind forget.lua, which takes the state's holds).
//
// # Approximate limits: leases
//
// An approximate limit is decided in this replica's memory (approx.go: the
// table, its lock stripes, its clock) within a lease of the limit that
// Redis grants; Redis holds admitted + unexpired leases ≤ limit:
//
//   - approxentry.go: a limit's windows (the current and the one before),
//     what each has pending, in flight, leased and reported;
//   - approxdecide.go: the decision within the lease (or a new window's
//     blind budget), else an ask, else the failure policy;
//   - approxask.go: the ask, one call shared by the window's callers;
//   - approxsync.go: the syncer, every interval, per master: reports,
//     renews and resizes the leases, and drains at shutdown;
//   - approxcall.go, approx.lua: one call for many windows: expired leases
//     go back, reports count once (running totals), the new lease is sized;
//   - approxsizing.go: the round trip, call timeout, lease TTL and
//     horizon, the shares and the blind budgets;
//   - approxregistry.go, approx_replicas.lua: how many replicas share the
//     limits (leases and blind budgets divide by it);
//   - approxcheck.go: batches mixing approximate and exact requests, and
//     all-or-nothing groups (what the table counted is taken back);
//   - approxmetrics.go: their metrics (throttle_approximate_*, or
//     throttle_global_* for the global Redis).
//
// The lease rule (a holder stops spending a TTL after it sent the call
// that granted the lease, before Redis gives it back) and the bound are
// in docs/algorithms.md.
//
// # Beside the stages
//
// holds.go keeps holds (reservations) beside their counters (hold.lua:
// batch.lua writes them, settle and sweep give them back); holdsweep.go
// runs each store's sweeper of expired holds and measures them; ledger.go (ledger.lua) caps each
// owner's outstanding reservations; ready.go's Store.Ready asks every
// master whether it answers, through no breaker; guardmetrics.go is the
// Guard's metrics.
//
// Every key carries a TTL; the clock is Redis's TIME, so replicas on skewed
// hosts agree. docs/algorithms.md has the semantics and the measurements.
package redisstore
