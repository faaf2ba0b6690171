package algorithms

import (
	"strconv"
	"strings"
)

// Tag is the short tag of an algorithm in a state's name (StateName), and so
// in its Redis key: each algorithm keeps its state apart, so switching a
// limit's algorithm never reads state of another shape. "" for no algorithm.
func (a Algorithm) Tag() string {
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

// StateName names the state a request reads and writes within its
// identifier (Key.Scope, Key.Identifier): two requests of one identifier
// share state exactly when their names are equal, in every store. It is
// "<alg>:n:<name>" for a named limit, "<alg>:l:<limit>:<window ms>:<refill>"
// for an unnamed one, so different limits never share state. A window
// algorithm's name ends in "@<window µs>": its state is a counter per
// window, and the Redis store's Reset works out from it which counters are
// live.
func StateName(r *Request) string {
	return string(AppendStateName(make([]byte, 0, 48), r))
}

// AppendStateName appends r's StateName to b.
func AppendStateName(b []byte, r *Request) []byte {
	b = append(b, r.Limit.Algorithm.Tag()...)
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

// EscapeKeyPart percent-encodes the characters that give a key its structure:
// '%' (the escape itself), ':' (the separator), and '{' '}' (Redis Cluster's
// hash-tag delimiters). Distinct parts stay distinct after escaping, and an
// escaped part contains no separator, so joined parts can't be confused.
func EscapeKeyPart(s string) string {
	if !strings.ContainsAny(s, "%:{}") {
		return s
	}
	return string(AppendKeyPart(make([]byte, 0, len(s)+8), s))
}

// AppendKeyPart appends s to b escaped as EscapeKeyPart escapes it.
func AppendKeyPart(b []byte, s string) []byte {
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
