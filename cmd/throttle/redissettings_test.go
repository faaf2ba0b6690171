package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// target is what a test compares of a redisTarget.
type target struct {
	Kind, Network, Master    string
	Addrs                    []string
	User, Password           string
	SentinelUser, SentinelPw string
	TLS                      string // the TLS server name; "" without TLS
	Pool, MaxRetries, DB     int
	Dial, Read, Write        time.Duration
	Redirects                int
}

func targetOf(t *redisTarget) target {
	o := t.opts
	got := target{Kind: t.kind, Network: t.network, Master: o.MasterName, Addrs: o.Addrs, User: o.Username, Password: o.Password,
		SentinelUser: o.SentinelUsername, SentinelPw: o.SentinelPassword, Pool: o.PoolSize, MaxRetries: o.MaxRetries, DB: o.DB,
		Dial: o.DialTimeout, Read: o.ReadTimeout, Write: o.WriteTimeout, Redirects: o.MaxRedirects}
	if o.TLSConfig != nil {
		got.TLS = o.TLSConfig.ServerName
	}
	return got
}

// throttleDefaults is a target with Throttle's defaults (setDefaults).
func throttleDefaults(t target) target {
	if t.Pool == 0 {
		t.Pool = 128
	}
	if t.MaxRetries == 0 {
		t.MaxRetries = -1
	}
	for _, d := range []*time.Duration{&t.Dial, &t.Read, &t.Write} {
		if *d == 0 {
			*d = time.Second
		}
	}
	if t.Kind == redisCluster && t.Redirects == 0 {
		t.Redirects = 1
	}
	return t
}

// TestRedisSettings: REDIS_URL in every form, with the reference
// service's other settings, makes the client options it says.
func TestRedisSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want target
	}{
		{"istio's sample: tcp, host:port", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis:6379"}}},
		{"host:port infers tcp", map[string]string{"REDIS_URL": "10.0.0.5:6380"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"10.0.0.5:6380"}}},
		{"a path infers unix", map[string]string{"REDIS_URL": "/var/run/nutcracker/ratelimit.sock"},
			target{Kind: "single", Network: "unix", Addrs: []string{"/var/run/nutcracker/ratelimit.sock"}}},
		{"unix given, any case", map[string]string{"REDIS_SOCKET_TYPE": "UNIX", "REDIS_URL": "redis.sock", "REDIS_TYPE": "SINGLE"},
			target{Kind: "single", Network: "unix", Addrs: []string{"redis.sock"}}},
		{"password", map[string]string{"REDIS_URL": "redis:6379", "REDIS_AUTH": "s3cret"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis:6379"}, Password: "s3cret"}},
		{"user:password, the first colon", map[string]string{"REDIS_URL": "redis:6379", "REDIS_AUTH": "app:pa:ss"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis:6379"}, User: "app", Password: "pa:ss"}},
		{"tls, pool, timeout", map[string]string{"REDIS_URL": "redis.example.com:6380", "REDIS_TLS": "true", "REDIS_POOL_SIZE": "10", "REDIS_TIMEOUT": "10s"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis.example.com:6380"}, TLS: "redis.example.com", Pool: 10, Dial: 10 * time.Second, Read: 10 * time.Second, Write: 10 * time.Second}},
		{"sentinel", map[string]string{"REDIS_TYPE": "Sentinel", "REDIS_URL": "mymaster,s1:26379, s2:26379", "REDIS_AUTH": "m", "REDIS_SENTINEL_AUTH": "admin:s"},
			target{Kind: "sentinel", Network: "tcp", Master: "mymaster", Addrs: []string{"s1:26379", "s2:26379"}, Password: "m", SentinelUser: "admin", SentinelPw: "s"}},
		{"sentinel ignores the socket type, as the reference", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379", "REDIS_SOCKET_TYPE": "unix"},
			target{Kind: "sentinel", Network: "tcp", Master: "mymaster", Addrs: []string{"s1:26379"}}},
		{"cluster", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "n1:7000,n2:7000,n3:7000", "REDIS_TLS": "true"},
			target{Kind: "cluster", Network: "tcp", Addrs: []string{"n1:7000", "n2:7000", "n3:7000"}, TLS: "n1"}},
		{"sentinel auth ignored without sentinel, as the reference", map[string]string{"REDIS_URL": "redis:6379", "REDIS_SENTINEL_AUTH": "x"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis:6379"}}},
		{"redis:// URL", map[string]string{"REDIS_URL": "redis://u:p@redis:6379/2?pool_size=7&dial_timeout=3s"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis:6379"}, User: "u", Password: "p", DB: 2, Pool: 7, Dial: 3 * time.Second}},
		{"a redis:// URL's user, REDIS_AUTH's password", map[string]string{"REDIS_URL": "redis://app@redis:6379", "REDIS_AUTH": "p"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis:6379"}, User: "app", Password: "p"}},
		{"redis:// URL and the settings it leaves out", map[string]string{"REDIS_URL": "rediss://redis:6380", "REDIS_TYPE": "single", "REDIS_SOCKET_TYPE": "tcp", "REDIS_AUTH": "p", "REDIS_TLS": "true", "REDIS_POOL_SIZE": "9", "REDIS_TIMEOUT": "2s"},
			target{Kind: "single", Network: "tcp", Addrs: []string{"redis:6380"}, Password: "p", TLS: "redis", Pool: 9, Dial: 2 * time.Second, Read: 2 * time.Second, Write: 2 * time.Second}},
		{"sentinel URL", map[string]string{"REDIS_URL": "redis://:sp@s1:26379/0?master_name=mymaster&addr=s2:26379&password=mp", "REDIS_TYPE": "sentinel"},
			target{Kind: "sentinel", Network: "tcp", Master: "mymaster", Addrs: []string{"s1:26379", "s2:26379"}, Password: "mp", SentinelPw: "sp"}},
		{"cluster URL", map[string]string{"REDIS_URL": "redis://n1:7000?cluster=true&addr=n2:7000&max_redirects=3"},
			target{Kind: "cluster", Network: "tcp", Addrs: []string{"n1:7000", "n2:7000"}, Redirects: 3}},
		{"REDIS_TYPE=cluster on a redis:// URL", map[string]string{"REDIS_URL": "redis://n1:7000", "REDIS_TYPE": "cluster"},
			target{Kind: "cluster", Network: "tcp", Addrs: []string{"n1:7000"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseServe(nil, env(tt.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			rt, err := parseRedisTarget(c.Redis, "REDIS_")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(throttleDefaults(tt.want), targetOf(rt)); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRedisSettingsErrors: a bad value or a contradiction is refused with
// a sentence that names the settings, and never shows a password.
func TestRedisSettingsErrors(t *testing.T) {
	const pw = "Hunter2-secret"
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_URL": "http://redis:6379"}, "REDIS_URL: must start with redis:// or rediss://, or be host:port"},
		{map[string]string{"REDIS_URL": "redis"}, `REDIS_URL: "redis" is not host:port (for a unix socket give its path`},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_SOCKET_TYPE": "udp"}, `REDIS_SOCKET_TYPE: "udp" is not tcp or unix`},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_TYPE": "replicated"}, `REDIS_TYPE: "replicated" is not single, sentinel or cluster`},
		{map[string]string{"REDIS_URL": "a:1,b:2"}, "REDIS_URL lists 2 addresses, but REDIS_TYPE is not given (single): set REDIS_TYPE=cluster"},
		{map[string]string{"REDIS_URL": "a:1,b:2", "REDIS_TYPE": "single"}, "REDIS_URL lists 2 addresses, but REDIS_TYPE is single"},
		{map[string]string{"REDIS_URL": "s1:26379", "REDIS_TYPE": "sentinel"}, "REDIS_TYPE=sentinel: REDIS_URL must be the master's name, then its Sentinels: mymaster,host:port"},
		{map[string]string{"REDIS_URL": "mymaster,s1", "REDIS_TYPE": "sentinel"}, `REDIS_URL: "s1" is not host:port`},
		{map[string]string{"REDIS_URL": "n1:7000,n2", "REDIS_TYPE": "cluster"}, `REDIS_URL: "n2" is not host:port`},
		{map[string]string{"REDIS_URL": "redis://r:6379?cluster=true", "REDIS_TYPE": "sentinel"}, "REDIS_TYPE=sentinel needs the master's name: add ?master_name=mymaster to REDIS_URL"},
		{map[string]string{"REDIS_URL": "redis://r:6379?cluster=true", "REDIS_TYPE": "single"}, "REDIS_TYPE=single contradicts REDIS_URL, whose ?cluster=true makes it a cluster"},
		{map[string]string{"REDIS_URL": "redis://r:6379?master_name=m", "REDIS_TYPE": "cluster"}, "REDIS_TYPE=cluster contradicts REDIS_URL, whose ?master_name= makes it a sentinel"},
		{map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_SOCKET_TYPE": "unix"}, "REDIS_SOCKET_TYPE=unix contradicts a redis:// REDIS_URL"},
		{map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_TLS": "true"}, "REDIS_TLS=true contradicts a redis:// REDIS_URL: use rediss://"},
		{map[string]string{"REDIS_URL": "redis://:" + pw + "@r:6379", "REDIS_AUTH": pw}, "REDIS_AUTH and a password in REDIS_URL: give the password once"},
		{map[string]string{"REDIS_URL": "redis://:" + pw + "@s:26379?master_name=m", "REDIS_SENTINEL_AUTH": pw}, "REDIS_SENTINEL_AUTH and a Sentinel password in REDIS_URL"},
		{map[string]string{"REDIS_URL": "redis://r:6379?pool_size=3", "REDIS_POOL_SIZE": "4"}, "REDIS_POOL_SIZE and REDIS_URL's pool_size= both set"},
		{map[string]string{"REDIS_URL": "redis://r:6379?read_timeout=3s", "REDIS_TIMEOUT": "4s"}, "REDIS_TIMEOUT and REDIS_URL's dial_timeout=, read_timeout= or write_timeout= both set"},
		{map[string]string{"REDIS_URL": "redis://:" + pw + "@r:6379?bogus=1"}, "REDIS_URL (single): redis: unexpected option: bogus"},
		{map[string]string{"REDIS_URL": "redis://:" + pw + "@s:26379?master_name=m&use_disconnected_replicas=true"}, "REDIS_URL (sentinel): option usedisconnectedreplicas is not supported here"},
		{map[string]string{"REDIS_URL": "redis://:" + pw + "@r:%zz"}, "REDIS_URL redis://:xxxxx@r:%zz: invalid port"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_POOL_SIZE": "0"}, `REDIS_POOL_SIZE: "0" is not a number of at least 1`},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TIMEOUT": "soon"}, `REDIS_TIMEOUT: "soon" is not a duration`},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_PIPELINE_WINDOW": "-1ms"}, `REDIS_PIPELINE_WINDOW: "-1ms" is not a duration`},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS": "yes please"}, `REDIS_TLS: "yes please" is not true or false`},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "r2:6379"}, "REDIS_PERSECOND: true needs REDIS_URL"},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_URL": "r:6379"}, "REDIS_PERSECOND: true needs REDIS_PERSECOND_URL"},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_URL": "r:6379", "REDIS_PERSECOND_URL": "a:1,b:2", "REDIS_PERSECOND_AUTH": pw}, "REDIS_PERSECOND_URL lists 2 addresses, but REDIS_PERSECOND_TYPE is not given"},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_URL": "r:6379", "REDIS_PERSECOND_URL": "redis://r2:1", "REDIS_PERSECOND_TLS": "true"}, "REDIS_PERSECOND_TLS=true contradicts a redis:// REDIS_PERSECOND_URL"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS_CACERT": "/ca.pem"}, "REDIS_TLS_CACERT: needs TLS to Redis (a rediss:// REDIS_URL, or REDIS_TLS=true)"},
		{map[string]string{"EXPIRATION_JITTER_MAX_SECONDS": "-5"}, `EXPIRATION_JITTER_MAX_SECONDS: "-5" is not a number of seconds from 0 to 86400`},
		{map[string]string{"EXPIRATION_JITTER_MAX_SECONDS": "5m"}, `EXPIRATION_JITTER_MAX_SECONDS: "5m" is not a number of seconds`},
		{map[string]string{"NEAR_LIMIT_RATIO": "0"}, "NEAR_LIMIT_RATIO: 0 is not above 0 and at most 1"},
		{map[string]string{"NEAR_LIMIT_RATIO": "1.5"}, "NEAR_LIMIT_RATIO: 1.5 is not above 0 and at most 1"},
		{map[string]string{"NEAR_LIMIT_RATIO": "most"}, `NEAR_LIMIT_RATIO: "most" is not a number`},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "COUNT_REJECTED_HITS": "true"}, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true and COUNT_REJECTED_HITS=true contradict each other"},
		{map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "on"}, `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: "on" is not true or false`},
	} {
		_, err := parseServe(nil, env(tt.env), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want it to contain %q", tt.env, err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "Hunter2") {
			t.Errorf("%v: err = %v shows the password", tt.env, err)
		}
	}
}

// TestRedisSettingsAccepted: the reference's settings Throttle parses into
// config, with their defaults when not given.
func TestRedisSettingsAccepted(t *testing.T) {
	c, err := parseServe(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.RedisPerSecond || c.RedisHealthCheck || c.ExpirationJitter != 0 || c.StopIncrementOverLimit || c.NearLimitRatio != 0.8 {
		t.Errorf("defaults: per-second %v, health check %v, jitter %v, stop %v, near %v", c.RedisPerSecond, c.RedisHealthCheck, c.ExpirationJitter, c.StopIncrementOverLimit, c.NearLimitRatio)
	}
	c, err = parseServe(nil, env(map[string]string{
		"REDIS_URL": "r:6379", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "True", "EXPIRATION_JITTER_MAX_SECONDS": "300",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "1", "NEAR_LIMIT_RATIO": "0.9", "REDIS_PIPELINE_WINDOW": "150us",
		"REDIS_PERSECOND": "TRUE", "REDIS_PERSECOND_URL": "/run/persecond.sock", "REDIS_PERSECOND_POOL_SIZE": "5",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.RedisPerSecond || !c.RedisHealthCheck || c.ExpirationJitter != 300*time.Second || !c.StopIncrementOverLimit || c.NearLimitRatio != 0.9 {
		t.Errorf("given: per-second %v, health check %v, jitter %v, stop %v, near %v", c.RedisPerSecond, c.RedisHealthCheck, c.ExpirationJitter, c.StopIncrementOverLimit, c.NearLimitRatio)
	}
	if !slices.Equal(c.Inert, []string{"REDIS_PIPELINE_WINDOW"}) {
		t.Errorf("settings named in the log as without effect: %q, want REDIS_PIPELINE_WINDOW", c.Inert)
	}
	rt, err := parseRedisTarget(c.PerSecond, "REDIS_PERSECOND_")
	if err != nil {
		t.Fatal(err)
	}
	if got := targetOf(rt); got.Network != "unix" || got.Addrs[0] != "/run/persecond.sock" || got.Pool != 5 {
		t.Errorf("per-second target = %+v", got)
	}
}
