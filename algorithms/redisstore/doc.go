// Package redisstore is the Redis counter store of Throttle's engine: an
// algorithms.Store whose state lives in Redis (single, Sentinel or Cluster),
// so every replica enforces one shared limit, and the Guard that keeps
// answering when Redis does not.
//
// A batch of requests meets these stages, in order (the file of each):
//
//  1. overlimit.go: OverLimitCache (the Envoy service only, when
//     LOCAL_CACHE_SIZE_IN_BYTES is set) answers from memory the requests
//     Redis has just rejected, until they could be admitted.
//  2. split.go: with a per-second Redis (REDIS_PERSECOND), Split sends
//     the requests of one-second limits to that Redis's Guard and the rest
//     to the main one's, both at once, and takes back on one what an
//     all-or-nothing group the other voided had counted (refundAt).
//  3. guard.go: Guard.Check validates the batch; approxcheck.go sends its
//     approximate requests (algorithms.Approximate) to the table of
//     approx.go, which decides them from memory within this replica's
//     lease (approxdecide.go), asking Redis at once when the lease runs out
//     (approxask.go; by the failure policy when their master's syncs have
//     failed for a while), and the rest on to
//     Redis: Guard.checkExact takes the call's budget
//     from the caller's deadline and, per master, asks its circuit breaker
//     (breaker.go) whether to call Redis or to answer by the failure policy
//     (FAILURE_MODE); a call that fails is answered by the policy, one
//     that timed out while its master answers others is ErrOverloaded.
//  4. route.go: dispatch splits the batch by the master of each key's slot
//     (cluster.go reads the Cluster's slot table; keys.go names keys with a
//     hash tag per identifier), decides the parts at once, and sends a part
//     that met a redirect once more; a single Redis is one part.
//  5. shard.go: a shard is one master (a single Redis is one too): its
//     client, its coalescer, its clock, the counters it knows; onShard
//     decides a part there, in a span when tracing (trace.go).
//  6. coalesce.go: the coalescer merges the batches of concurrent callers
//     into one call per master.
//  7. store.go: decide sends each request by its consistency regime
//     (algorithms.Counting): CountThenRefund windows to plain.go, the rest
//     to script.go, the two at once when a call holds both.
//  8. plain.go counts first: a pipeline of SET NX (a new counter, with its
//     TTL, jittered by Options.ExpirationJitter) or INCRBY (a counter known.go knows exists) per request, on
//     Redis's clock (clock.go); then it refunds what must not stay counted
//     (refund.lua): hits over the limit, a void all-or-nothing group.
//  9. script.go packs the batch for batch.lua, which functions.go runs as a
//     Redis function (FCALL) or, where that is refused, a script (EVALSHA):
//     one atomic step that reads, decides and counts, an algorithm per .lua
//     file.
//  10. algorithms.DecideFound turns what Redis found of each request into
//     its decision, by the arithmetic the memory store uses.
//  11. clear.go: on a Cluster, what one master counted for an all-or-nothing
//     group another master voided is refunded (refundVoided); Clear and
//     Reset (store.go) delete state.
//
// Apart from these stages, approxsync.go's syncer reports the approximate
// limits' hits to each master every interval and resizes this replica's
// leases (approxcall.go, approx.lua), and reads how many replicas share
// them (approxregistry.go, approx_replicas.lua); and
// readiness: ready.go's Store.Ready asks each
// master itself whether it answers, through no breaker and counting nothing.
//
// Every key carries a TTL; the clock is Redis's TIME, so replicas on skewed
// hosts agree. docs/algorithms.md has the semantics and the measurements.
package redisstore
