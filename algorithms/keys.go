package algorithms

import (
	"strconv"
	"strings"
)

// keyPrefix starts every Redis key Throttle writes.
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

// escapeKeyPart percent-encodes the characters that give a key its structure:
// '%' (the escape itself), ':' (the separator), and '{' '}' (Redis Cluster's
// hash-tag delimiters). Distinct parts stay distinct after escaping, and an
// escaped part contains no separator, so joined parts can't be confused.
func escapeKeyPart(s string) string {
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
	return escapeKeyPart(scope) + ":" + escapeKeyPart(identifier)
}

// identityPrefix is the common start of every key of (scope, identifier):
// "throttle:{<scope>:<identifier>}:".
func identityPrefix(scope, identifier string) string {
	return keyPrefix + "{" + identityTag(scope, identifier) + "}:"
}

// indexKey lists the state keys of one identifier, so Reset finds them
// without scanning the keyspace.
func indexKey(scope, identifier string) string {
	return identityPrefix(scope, identifier) + "i"
}

// stateMember names one limit's state inside an identifier:
// "<alg>:n:<name>" for a named limit, "<alg>:l:<limit>:<window ms>:<refill>"
// for an unnamed one, so different limits never share state.
func stateMember(r Request) string {
	code := algCode(r.Limit.Algorithm)
	if r.Key.Name != "" {
		return code + ":n:" + r.Key.Name
	}
	s := code + ":l:" + strconv.FormatInt(r.Limit.Limit, 10) + ":" + strconv.FormatInt(r.Limit.Window.Milliseconds(), 10)
	if r.Limit.Algorithm == TokenBucket {
		s += ":" + strconv.FormatFloat(r.Limit.Refill(), 'g', -1, 64)
	}
	return s
}

// stateKey is the Redis key of one limit's state on one identifier.
func stateKey(r Request) string {
	return identityPrefix(r.Key.Scope, r.Key.Identifier) + stateMember(r)
}
