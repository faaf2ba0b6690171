package redisstore

import (
	"strconv"

	"github.com/throttle-rl/throttle/algorithms"
)

// keyPrefix starts every Redis key Throttle writes, after
// Options.KeyPrefix.
const keyPrefix = "throttle:"

// appendIdentityPrefix appends the common start of every key of (scope,
// identifier): "<KeyPrefix>throttle:{<scope>:<identifier>}:". Its hash tag
// is shared by every key of one identifier, and so one Redis Cluster slot,
// which lets one Lua script touch a limit's state and the identifier's
// index together.
func (s *Store) appendIdentityPrefix(b []byte, scope, identifier string) []byte {
	b = append(b, s.opts.KeyPrefix...)
	b = append(b, keyPrefix+"{"...)
	b = algorithms.AppendKeyPart(b, scope)
	b = append(b, ':')
	b = algorithms.AppendKeyPart(b, identifier)
	return append(b, "}:"...)
}

// identityPrefix is appendIdentityPrefix's prefix as a string.
func (s *Store) identityPrefix(scope, identifier string) string {
	return string(s.appendIdentityPrefix(make([]byte, 0, 64), scope, identifier))
}

// indexKey lists the state keys of one identifier, so Reset finds them
// without scanning the keyspace.
func (s *Store) indexKey(scope, identifier string) string {
	return s.identityPrefix(scope, identifier) + "i"
}

// appendStateKey appends r's stateKey to b.
func (s *Store) appendStateKey(b []byte, r *algorithms.Request) []byte {
	return algorithms.AppendStateName(s.appendIdentityPrefix(b, r.Key.Scope, r.Key.Identifier), r)
}

// stateKey is the Redis key of one limit's state on one identifier (a
// window algorithm's: the start of its counters' keys).
func (s *Store) stateKey(r *algorithms.Request) string {
	var buf [160]byte
	return string(s.appendStateKey(buf[:0], r))
}

// windowKey is the key of the counter of the window that holds nowUS.
func (s *Store) windowKey(r *algorithms.Request, nowUS int64) string {
	var buf [160]byte
	b := append(s.appendStateKey(buf[:0], r), ':')
	return string(strconv.AppendInt(b, nowUS/r.Limit.Window.Microseconds(), 10))
}

// leaseKey is the hash of the replicas' leases of r's window num, an
// approximate limit's (approx.lua): its counter's key and ":l".
func (s *Store) leaseKey(r *algorithms.Request, num int64) string {
	var buf [160]byte
	b := append(s.appendStateKey(buf[:0], r), ':')
	b = strconv.AppendInt(b, num, 10)
	return string(append(b, ":l"...))
}
