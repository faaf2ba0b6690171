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
	return string(appendKeyPart(make([]byte, 0, len(s)+8), s))
}

// appendKeyPart appends s to b escaped as EscapeKeyPart escapes it.
func appendKeyPart(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b = append(b, "%25"...)
		case ':':
			b = append(b, "%3A"...)
		case '{':
			b = append(b, "%7B"...)
		case '}':
			b = append(b, "%7D"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendIdentityPrefix appends the common start of every key of (scope,
// identifier): "<KeyPrefix>throttle:{<scope>:<identifier>}:". Its hash tag
// is shared by every key of one identifier, and so one Redis Cluster slot,
// which lets one Lua script touch a limit's state and the identifier's
// index together.
func (s *RedisStore) appendIdentityPrefix(b []byte, scope, identifier string) []byte {
	b = append(b, s.opts.KeyPrefix...)
	b = append(b, keyPrefix+"{"...)
	b = appendKeyPart(b, scope)
	b = append(b, ':')
	b = appendKeyPart(b, identifier)
	return append(b, "}:"...)
}

// identityPrefix is appendIdentityPrefix's prefix as a string.
func (s *RedisStore) identityPrefix(scope, identifier string) string {
	return string(s.appendIdentityPrefix(make([]byte, 0, 64), scope, identifier))
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
	return string(appendStateMember(make([]byte, 0, 48), r))
}

// appendStateMember appends r's stateMember to b.
func appendStateMember(b []byte, r *Request) []byte {
	b = append(b, algCode(r.Limit.Algorithm)...)
	if r.Key.Name != "" {
		b = append(b, ":n:"...)
		b = append(b, r.Key.Name...)
	} else {
		b = append(b, ":l:"...)
		b = strconv.AppendInt(b, r.Limit.Limit, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, r.Limit.Window.Milliseconds(), 10)
	}
	switch r.Limit.Algorithm {
	case TokenBucket:
		if r.Key.Name == "" {
			b = append(b, ':')
			b = strconv.AppendFloat(b, r.Limit.Refill(), 'g', -1, 64)
		}
	case FixedWindow, SlidingWindow:
		b = append(b, '@')
		b = strconv.AppendInt(b, r.Limit.Window.Microseconds(), 10)
	}
	return b
}

// appendStateKey appends r's stateKey to b.
func (s *RedisStore) appendStateKey(b []byte, r *Request) []byte {
	return appendStateMember(s.appendIdentityPrefix(b, r.Key.Scope, r.Key.Identifier), r)
}

// stateKey is the Redis key of one limit's state on one identifier (a
// window algorithm's: the start of its counters' keys).
func (s *RedisStore) stateKey(r *Request) string {
	var buf [160]byte
	return string(s.appendStateKey(buf[:0], r))
}

// windowKey is the key of the counter of the window that holds nowUS.
func (s *RedisStore) windowKey(r *Request, nowUS int64) string {
	var buf [160]byte
	b := append(s.appendStateKey(buf[:0], r), ':')
	return string(strconv.AppendInt(b, nowUS/r.Limit.Window.Microseconds(), 10))
}
