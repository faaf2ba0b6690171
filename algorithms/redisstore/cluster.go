package redisstore

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// nodeOptions are the options of the client of one Cluster node: the
// Cluster's own settings (from REDIS_URL), for one address. The Cluster
// settings that matter are chosen in cmd/throttle (see newRedis there).
func nodeOptions(co *redis.ClusterOptions, addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ClientName:            co.ClientName,
		Dialer:                co.Dialer,
		OnConnect:             co.OnConnect,
		Protocol:              co.Protocol,
		Username:              co.Username,
		Password:              co.Password,
		CredentialsProvider:   co.CredentialsProvider,
		MaxRetries:            co.MaxRetries,
		MinRetryBackoff:       co.MinRetryBackoff,
		MaxRetryBackoff:       co.MaxRetryBackoff,
		DialTimeout:           co.DialTimeout,
		DialerRetries:         co.DialerRetries,
		ReadTimeout:           co.ReadTimeout,
		WriteTimeout:          co.WriteTimeout,
		ContextTimeoutEnabled: co.ContextTimeoutEnabled,
		PoolFIFO:              co.PoolFIFO,
		PoolSize:              co.PoolSize,
		PoolTimeout:           co.PoolTimeout,
		MinIdleConns:          co.MinIdleConns,
		MaxIdleConns:          co.MaxIdleConns,
		MaxActiveConns:        co.MaxActiveConns,
		ConnMaxIdleTime:       co.ConnMaxIdleTime,
		ConnMaxLifetime:       co.ConnMaxLifetime,
		TLSConfig:             co.TLSConfig,
		DisableIdentity:       co.DisableIdentity,
	}
}

// clusterReady is the probe of a Cluster master: it answers, and serves its
// slots. A master that restarts answers PING at once but CLUSTERDOWN for a
// while (until it has rejoined the Cluster); a PING would close its
// circuit too early.
func clusterReady(ctx context.Context, c *redis.Client) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("CLUSTERDOWN: the master is not serving (cluster_state is not ok)")
	}
	return nil
}

// isRedirect reports whether err is a reply saying the slot is served
// elsewhere (MOVED, ASK) or is moving (TRYAGAIN): the call did not run.
func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN"} {
		if strings.Contains(err.Error(), p) {
			return true
		}
	}
	return false
}

// keySlot is the Cluster hash slot of key: CRC16 of its hash tag (the part
// between the first '{' and the next '}', when not empty), else of the key.
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % clusterSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's
// key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
