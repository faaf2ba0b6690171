package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

// The engine's Lua, embedded: run as a function library where Redis
// allows it (FCALL), as a script (EVALSHA) where not.
var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
	//go:embed gcra.lua
	gcraLua string
	//go:embed batch.lua
	batchLua string
	//go:embed hold.lua
	holdLua string
	//go:embed forget.lua
	forgetLua string
	//go:embed reset.lua
	resetLua string
	//go:embed clear.lua
	clearLua string
	//go:embed refund.lua
	refundLua string
)

// The engine runs in Redis as a function (Redis 7's FUNCTION LOAD, then
// FCALL): the library is loaded once per master, so a call runs only the
// batch, not the whole chunk that defines the algorithms, as an EVALSHA
// would each time. Where functions cannot be loaded (Redis 6, or an ACL
// that refuses FUNCTION LOAD) the same code runs as a script (EVALSHA).
// The library's name carries a hash of its code, so replicas of different
// versions, during a rolling upgrade, each call their own.

// evalCall ends the script form of the code; settleCall, sweepCall and
// heldCall end the forms that settle holds, sweep expired ones and sum
// what a counter's holds hold (hold.lua).
const (
	evalCall   = "\nreturn batch(KEYS, ARGV)\n"
	settleCall = "\nreturn settle(KEYS, ARGV)\n"
	sweepCall  = "\nreturn sweep(KEYS, ARGV)\n"
	heldCall   = "\nreturn held(KEYS, ARGV)\n"
)

// luaFn is one function of the library: its name, and the script that
// runs it where functions cannot be used.
type luaFn struct {
	name   string
	script *redis.Script
}

// How a master runs the engine (its field lua): luaUnknown until a call told.
const (
	luaUnknown int32 = iota
	luaFunction
	luaEval
)

// luaLibrary returns the library's code and the version its functions'
// names end in (throttle_batch_<version>, throttle_settle_…,
// throttle_sweep_…, throttle_held_…).
func luaLibrary() (code, version string) {
	body := luaCode()
	sum := sha1.Sum([]byte(body))
	version = hex.EncodeToString(sum[:8])
	// allow-cross-slot-keys: on a Cluster one call touches keys of several
	// slots of its master; elsewhere it changes nothing.
	code = "#!lua name=throttle_" + version + "\n" + body
	for _, f := range []string{"batch", "settle", "sweep", "held"} {
		code += "\nredis.register_function{function_name='throttle_" + f + "_" + version + "', callback=" + f + ", flags={'allow-cross-slot-keys'}}"
	}
	return code + "\n", version
}

// runBatch runs the engine on master sh: FCALL, loading the library
// first when the master has not got it (a new master, a restart without
// persistence, FUNCTION FLUSH); EVALSHA where functions cannot be loaded or
// called (Redis 6).
func (s *Store) runBatch(ctx context.Context, sh *master, keys []string, args []any) *redis.Cmd {
	return s.runFn(ctx, sh, s.batchFn, keys, args)
}

// runFn runs f of the library on master sh, as runBatch says.
func (s *Store) runFn(ctx context.Context, sh *master, f luaFn, keys []string, args []any) *redis.Cmd {
	if sh.lua.Load() == luaEval {
		return f.script.Run(ctx, sh.client, keys, args...)
	}
	cmd := sh.client.FCall(ctx, f.name, keys, args...)
	err := cmd.Err()
	switch {
	case isNoFunction(err):
		s.loadLibrary(ctx, sh)
		if sh.lua.Load() == luaEval {
			return f.script.Run(ctx, sh.client, keys, args...)
		}
		return sh.client.FCall(ctx, f.name, keys, args...)
	case isUnknownCommand(err):
		sh.lua.Store(luaEval)
		return f.script.Run(ctx, sh.client, keys, args...)
	case err == nil || errors.Is(err, redis.Nil):
		sh.lua.Store(luaFunction)
	}
	return cmd
}

// loadLibrary loads the library on master sh. A refusal (no FUNCTION
// command, no permission) makes the master run the script form from then
// on; a failure to reach the master leaves the question open.
func (s *Store) loadLibrary(ctx context.Context, sh *master) {
	err := sh.client.FunctionLoadReplace(ctx, s.library).Err()
	var re redis.Error
	switch {
	case err == nil:
		sh.lua.Store(luaFunction)
	case errors.As(err, &re) && !isRedirect(err) && !strings.HasPrefix(err.Error(), "LOADING") && !strings.HasPrefix(err.Error(), "CLUSTERDOWN"):
		sh.lua.Store(luaEval)
	}
}

// isUnknownCommand reports whether err says the server has no such command
// (FCALL before Redis 7).
func isUnknownCommand(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR unknown command")
}

// isNoFunction reports whether err says the master has no such function.
func isNoFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// crossSlot lets a script touch keys of several slots of one Cluster
// master (Redis 7).
const crossSlot = "#!lua flags=allow-cross-slot-keys\n"

// luaCode is the engine's Lua: the prelude, a function per algorithm, and
// batch.lua's batch, which calls them for each request of a batch.
func luaCode() string {
	var b strings.Builder
	b.WriteString(preludeLua)
	for _, a := range algorithms.Algorithms {
		b.WriteString(algorithmLua(a))
	}
	b.WriteString(holdLua)
	b.WriteString(batchLua)
	return b.String()
}

// algorithmLua returns the Lua function of algorithm a.
func algorithmLua(a algorithms.Algorithm) string {
	switch a {
	case algorithms.FixedWindow:
		return fixedWindowLua
	case algorithms.SlidingWindow:
		return slidingWindowLua
	case algorithms.TokenBucket:
		return tokenBucketLua
	case algorithms.GCRA:
		return gcraLua
	}
	panic("algorithms: no script for " + string(a)) // Algorithms lists only those above
}
