package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"
)

// requireLoopback refuses a host:port whose host is not, or does not
// resolve only to, a loopback address: a load generator must not be pointed
// at someone else's service by a typo.
func requireLoopback(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", hostport, err)
	}
	if port == "" {
		return fmt.Errorf("%q has no port", hostport)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("%s is not a loopback address: rlsload drives local servers only", host)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("resolve %q: %w", host, err)
	}
	for _, ip := range ips {
		if !ip.Unmap().IsLoopback() {
			return fmt.Errorf("%s resolves to %s, not a loopback address: rlsload drives local servers only", host, ip)
		}
	}
	return nil
}

// requireLoopbackRedis applies requireLoopback to a redis:// URL (a unix
// socket is local too).
func requireLoopbackRedis(url string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	if opt.Network == "unix" {
		return nil
	}
	return requireLoopback(opt.Addr)
}
