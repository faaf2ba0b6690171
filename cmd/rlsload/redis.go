package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStats is what INFO cpu and INFO commandstats say at one moment.
type redisStats struct {
	cpu  time.Duration         // used_cpu_user + used_cpu_sys: the whole server process
	cmds map[string]commandUse // by command name, lower case
}

// commandUse is one cmdstat_* line: calls and the µs spent in them.
type commandUse struct{ calls, usec int64 }

func openRedis(url string, poolSize int) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	opt.PoolSize = poolSize
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1 // a retried command would be counted twice
	return redis.NewClient(opt), nil
}

func readRedisStats(ctx context.Context, rdb *redis.Client) (redisStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("redis INFO: %w", err)
	}
	return parseRedisInfo(info)
}

// parseRedisInfo reads used_cpu_user, used_cpu_sys and the cmdstat_* lines
// (cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,…) of INFO.
func parseRedisInfo(info string) (redisStats, error) {
	s := redisStats{cmds: map[string]commandUse{}}
	var cpuFields int
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			sec, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return redisStats{}, fmt.Errorf("redis INFO: %s %q: %w", name, val, err)
			}
			s.cpu += time.Duration(math.Round(sec*1e6)) * time.Microsecond
			cpuFields++
		case strings.HasPrefix(name, "cmdstat_"):
			var u commandUse
			for _, kv := range strings.Split(val, ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "calls":
					u.calls, _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					u.usec, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			s.cmds[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] = u
		}
	}
	if cpuFields != 2 {
		return redisStats{}, errors.New("redis INFO: no used_cpu_user and used_cpu_sys")
	}
	return s, nil
}

// redisDelta is Redis's work between two INFOs.
type redisDelta struct {
	cpu         time.Duration
	commands    []string // the commands calls and usec sum up
	calls, usec int64
}

// engineCommands are the commands Throttle decides algorithm's requests
// with. Redis counts a command a script runs in INFO commandstats as well
// as the script, so each algorithm lists one kind: an Envoy descriptor's
// fixed or sliding window is decided by plain commands (SET, INCRBY,
// PEXPIRE, GET, a TIME per batch) and a script only to refund (EVALSHA, whose DECRBY and DEL
// are not listed); the other algorithms by the engine's script alone
// (FCALL; EVALSHA or EVAL where functions cannot be loaded), its own
// commands inside it not counted again.
func engineCommands(algorithm string) []string {
	scripts := []string{"fcall", "evalsha", "eval"}
	if algorithm == "fixed_window" || algorithm == "sliding_window" {
		return append(scripts, "set", "incrby", "pexpire", "get", "time")
	}
	return scripts
}

func diffRedis(before, after redisStats, commands ...string) *redisDelta {
	d := &redisDelta{cpu: after.cpu - before.cpu, commands: commands}
	for _, c := range commands {
		d.calls += after.cmds[c].calls - before.cmds[c].calls
		d.usec += after.cmds[c].usec - before.cmds[c].usec
	}
	return d
}

// runFloor measures the comparison point of a decision's Redis cost: what
// the simplest fixed window costs Redis, a pipelined INCRBY + EXPIRE per
// operation, from as many goroutines as the RLS runs, each operation on its
// own key.
func runFloor(ctx context.Context, o *options) (*result, error) {
	rdb, err := openRedis(o.redisURL, o.concurrency)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	op := func(prefix string) callFunc {
		return func(ctx context.Context, i int) (bool, string, error) {
			key := prefix + strconv.Itoa(i)
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.IncrBy(ctx, key, 1)
				p.Expire(ctx, key, time.Hour)
				return nil
			})
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return false, "DeadlineExceeded", err
				}
				return false, "RedisError", err
			}
			return false, "", nil
		}
	}
	if o.warmup > 0 {
		w := drive(ctx, o, o.warmup, 0, op("rlsload:floor:"+o.runID+":warmup:"))
		if w.errorCount() == w.calls && w.calls > 0 {
			return nil, fmt.Errorf("warmup: all %d operations failed: %v", w.calls, w.firstErr)
		}
	}
	before, err := readRedisStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	t := drive(ctx, o, o.requests, o.duration, op("rlsload:floor:"+o.runID+":"))
	after, err := readRedisStats(context.WithoutCancel(ctx), rdb)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted after %d operations", t.calls)
	}
	return &result{caseName: "floor", alg: "incrby_expire", cache: "-", perCall: 1, concurrency: o.concurrency, t: t,
		redis: diffRedis(before, after, "incrby", "expire")}, nil
}
