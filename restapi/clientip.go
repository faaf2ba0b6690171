package restapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientIP returns the address of the client that sent r. It is the peer's
// address (r.RemoteAddr) unless the peer is a trusted proxy; then it is the
// right-most address of X-Forwarded-For that is not a trusted proxy (walking
// from the right, the side our own proxies appended), or X-Real-IP when there
// is no X-Forwarded-For. Headers from an untrusted peer are ignored, so a
// client cannot choose its own address by sending them.
func clientIP(r *http.Request, trusted []netip.Prefix) string {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return r.RemoteAddr
		}
		return host
	}
	if !isTrusted(peer, trusted) {
		return peer.String()
	}
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		hops := strings.Split(strings.Join(xff, ","), ",")
		last := peer // the nearest trusted hop seen so far
		for i := len(hops) - 1; i >= 0; i-- {
			a, ok := parseAddr(strings.TrimSpace(hops[i]))
			if !ok {
				// A trusted proxy passed on something that is not an address:
				// the nearest hop we can vouch for is the answer.
				return last.String()
			}
			if !isTrusted(a, trusted) {
				return a.String()
			}
			last = a
		}
		return last.String() // every hop is one of ours
	}
	if a, ok := parseAddr(strings.TrimSpace(r.Header.Get("X-Real-IP"))); ok {
		return a.String()
	}
	return peer.String()
}

// parseAddr parses "ip", "ip:port" or "[ipv6]:port", and unmaps IPv4-mapped
// IPv6 addresses so that ::ffff:10.0.0.1 is 10.0.0.1.
func parseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
