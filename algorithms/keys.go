package algorithms

import (
	"strconv"
	"strings"
)

// keyPrefix starts every Redis key Throttle writes, after
// RedisOptions.KeyPrefix.
const keyPrefix = "throttle:"

// algCode is the short tag of an algorithm inside a key. Each algorithm keeps
// its state in its own key, so switching a limit's algorithm never reads state
// of another shape.
func algCode(a Algorithm) string {
	switch a {
	case FixedWindow:
		return "fw"
	case SlidingWindow:
		return "sw"
	case TokenBucket:
		return "tb"
	case GCRA:
		return "gcra"
	}
	return ""
}

// EscapeKeyPart percent-encodes the characters that give a key its structure:
// '%' (the escape itself), ':' (the separator), and '{' '}' (Redis Cluster's
// hash-tag delimiters). Distinct parts stay distinct after escaping, and an
// escaped part contains no separator, so joined parts can't be confused.
func EscapeKeyPart(s string) string {
	if !strings.ContainsAny(s, "%:{}") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// identityTag is the hash tag of (scope, identifier): every key of one
// identifier shares it, and so one Redis Cluster slot, which lets one Lua
// script touch a limit's state and the identifier's index together.
func identityTag(scope, identifier string) string {
	return EscapeKeyPart(scope) + ":" + EscapeKeyPart(identifier)
}

// identityPrefix is the common start of every key of (scope, identifier):
// "<KeyPrefix>throttle:{<scope>:<identifier>}:".
func (s *RedisStore) identityPrefix(scope, identifier string) string {
	return s.opts.KeyPrefix + keyPrefix + "{" + identityTag(scope, identifier) + "}:"
}

// indexKey lists the state keys of one identifier, so Reset finds them
// without scanning the keyspace.
func (s *RedisStore) indexKey(scope, identifier string) string {
	return s.identityPrefix(scope, identifier) + "i"
}

// stateMember names one limit's state inside an identifier:
// "<alg>:n:<name>" for a named limit, "<alg>:l:<limit>:<window ms>:<refill>"
// for an unnamed one, so different limits never share state. A window
// algorithm's member ends in "@<window µs>": its state is a counter per
// window, "<state key>:<window number>", and Reset works out from it which
// counters are live.
func stateMember(r *Request) string {
	code := algCode(r.Limit.Algorithm)
	var s string
	if r.Key.Name != "" {
		s = code + ":n:" + r.Key.Name
	} else {
		s = code + ":l:" + strconv.FormatInt(r.Limit.Limit, 10) + ":" + strconv.FormatInt(r.Limit.Window.Milliseconds(), 10)
	}
	switch r.Limit.Algorithm {
	case TokenBucket:
		if r.Key.Name == "" {
			s += ":" + strconv.FormatFloat(r.Limit.Refill(), 'g', -1, 64)
		}
	case FixedWindow, SlidingWindow:
		s += "@" + strconv.FormatInt(r.Limit.Window.Microseconds(), 10)
	}
	return s
}

// stateKey is the Redis key of one limit's state on one identifier (a
// window algorithm's: the start of its counters' keys).
func (s *RedisStore) stateKey(r *Request) string {
	return s.identityPrefix(r.Key.Scope, r.Key.Identifier) + stateMember(r)
}

// windowKey is the key of the counter of the window that holds nowUS.
func (s *RedisStore) windowKey(r *Request, nowUS int64) string {
	return s.stateKey(r) + ":" + strconv.FormatInt(nowUS/r.Limit.Window.Microseconds(), 10)
}
