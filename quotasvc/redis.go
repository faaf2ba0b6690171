package quotasvc

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

var (
	//go:embed write.lua
	writeLua string
	//go:embed load.lua
	loadLua string
	//go:embed save.lua
	saveLua string
)

// redisUsage is the usage store every replica shares. A group (one shared
// limit) has two keys with one hash tag, so Redis Cluster keeps them on one
// shard: "<group>:d", a hash of demands, and "<group>:a", the allocation.
// Each call is one pipeline of one script per group, with EVALSHA (EVAL when
// Redis answers NOSCRIPT). Times are Redis's TIME, so replicas with skewed
// clocks agree on what expired.
type redisUsage struct {
	rdb      redis.UniversalClient
	entryTTL time.Duration
	allocTTL time.Duration
	writeS   *redis.Script
	loadS    *redis.Script
	saveS    *redis.Script
}

func newRedisUsage(rdb redis.UniversalClient, entryTTL, allocTTL time.Duration) *redisUsage {
	return &redisUsage{
		rdb: rdb, entryTTL: entryTTL, allocTTL: allocTTL,
		writeS: redis.NewScript(writeLua), loadS: redis.NewScript(loadLua), saveS: redis.NewScript(saveLua),
	}
}

// groupKey is the key prefix of the shared limit of domain whose descriptor
// counter is counter, with the limit itself (sig) in it, so a limit changed
// by a reload starts afresh: "<prefix>throttle:q{<domain>:<counter>}:<sig>"
// (prefix: CACHE_KEY_PREFIX). The rate-limit counters' keys are
// "throttle:{…}", so the two never meet.
func groupKey(prefix, domain, counter, sig string) string {
	return prefix + "throttle:q{" + algorithms.EscapeKeyPart(domain) + ":" + algorithms.EscapeKeyPart(counter) + "}:" + algorithms.EscapeKeyPart(sig)
}

func (r *redisUsage) ttlArgs() (entry, key int64) {
	entry = r.entryTTL.Milliseconds()
	return entry, 2*entry + r.allocTTL.Milliseconds()
}

func (r *redisUsage) write(ctx context.Context, ds []demandWrite, ttl time.Duration) error {
	byGroup := map[string][]demand{}
	var order []string
	for _, d := range ds {
		if _, ok := byGroup[d.group]; !ok {
			order = append(order, d.group)
		}
		byGroup[d.group] = append(byGroup[d.group], d.demand)
	}
	entry, keyTTL := r.ttlArgs()
	if ttl > 0 {
		entry = ttl.Milliseconds()
	}
	_, err := r.pipeline(ctx, r.writeS, len(order), func(i int) ([]string, []any) {
		args := []any{entry, keyTTL}
		return []string{order[i] + ":d"}, appendDemands(args, byGroup[order[i]])
	})
	return err
}

func (r *redisUsage) load(ctx context.Context, epoch int64, gs []groupLoad) ([]loaded, error) {
	entry, keyTTL := r.ttlArgs()
	cmds, err := r.pipeline(ctx, r.loadS, len(gs), func(i int) ([]string, []any) {
		args := []any{epoch, entry, keyTTL}
		return []string{gs[i].group + ":d", gs[i].group + ":a"}, appendDemands(args, gs[i].local)
	})
	if err != nil {
		return nil, err
	}
	out := make([]loaded, len(gs))
	for i, c := range cmds {
		if out[i], err = parseLoaded(c.Val()); err != nil {
			return nil, fmt.Errorf("load %s: %w", gs[i].group, err)
		}
	}
	return out, nil
}

func (r *redisUsage) save(ctx context.Context, gs []groupSave) ([]string, error) {
	ttl := r.allocTTL.Milliseconds()
	cmds, err := r.pipeline(ctx, r.saveS, len(gs), func(i int) ([]string, []any) {
		return []string{gs[i].group + ":a"}, []any{gs[i].epoch, gs[i].alloc, ttl}
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(gs))
	for i, c := range cmds {
		s, ok := c.Val().(string)
		if !ok {
			return nil, fmt.Errorf("save %s: reply %T, want a string", gs[i].group, c.Val())
		}
		out[i] = s
	}
	return out, nil
}

// pipeline runs script once per group i with the keys and arguments args(i)
// gives, in one pipeline, and again with EVAL for the calls Redis answered
// NOSCRIPT (restarted, SCRIPT FLUSH). Any other failure fails the whole call.
func (r *redisUsage) pipeline(ctx context.Context, script *redis.Script, n int, args func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	if n == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, n)
	send := func(p redis.Pipeliner, i int, call func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) {
		keys, argv := args(i)
		cmds[i] = call(ctx, p, keys, argv...)
	}
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			send(p, i, script.EvalSha)
		}
		return nil
	})
	if err != nil && hasNoScript(cmds) {
		_, err = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range n {
				if isNoScript(cmds[i].Err()) {
					send(p, i, script.Eval)
				}
			}
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	return cmds, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func hasNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if c != nil && isNoScript(c.Err()) {
			return true
		}
	}
	return false
}

// appendDemands appends instance, rate pairs to args.
func appendDemands(args []any, ds []demand) []any {
	for _, d := range ds {
		args = append(args, d.instance, formatRate(d.rate))
	}
	return args
}

// formatRate writes a demand's rate for the store: "-1" when not known.
func formatRate(r float64) string {
	if r < 0 {
		return "-1"
	}
	return strconv.FormatFloat(r, 'f', 3, 64)
}

// parseLoaded reads load.lua's reply.
func parseLoaded(v any) (loaded, error) {
	items, ok := v.([]any)
	if !ok || len(items) == 0 {
		return loaded{}, fmt.Errorf("reply %T, want an array", v)
	}
	if flag, _ := items[0].(int64); flag == 1 {
		if len(items) != 2 {
			return loaded{}, fmt.Errorf("reply of %d items, want 2", len(items))
		}
		s, ok := items[1].(string)
		if !ok {
			return loaded{}, fmt.Errorf("allocation %T, want a string", items[1])
		}
		return loaded{alloc: s}, nil
	}
	var l loaded
	for i := 1; i+1 < len(items); i += 2 {
		id, _ := items[i].(string)
		raw, _ := items[i+1].(string)
		rate, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return loaded{}, fmt.Errorf("rate %q of %q: %w", raw, id, err)
		}
		l.demands = append(l.demands, demand{instance: id, rate: rate})
	}
	return l, nil
}
