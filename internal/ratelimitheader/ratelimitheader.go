// Package ratelimitheader writes the rate-limit response header fields both
// front doors send (REST /check and /register, and the gRPC responses Envoy
// passes on): which sets a reply carries (setting RATE_LIMIT_HEADERS), and the
// RateLimit-Policy and RateLimit fields of the IETF draft "RateLimit header
// fields for HTTP", draft-ietf-httpapi-ratelimit-headers-11 (23 May 2026; the
// fields' syntax is the same since -08), serialized as RFC 9651 structured
// fields:
//
//	RateLimit-Policy: "name";q=LIMIT;w=WINDOW_SECONDS, "other";q=…;w=…
//	RateLimit: "name";r=REMAINING;t=SECONDS, "other";r=…;t=…
//
// Each field is a List of Items; each Item is a String naming a quota policy,
// with Integer parameters: q (the quota, required), w (the window in seconds,
// optional, non-zero), r (the available quota, required), t (the effective
// window in seconds, optional). Neither the optional qu (quota unit, default
// "requests", which is what Throttle counts) nor pk (partition key) is sent.
package ratelimitheader

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// The draft's field names.
const (
	PolicyField = "RateLimit-Policy"
	Field       = "RateLimit"
)

// Sets chooses which rate-limit header sets a reply carries. The zero value
// is Both.
type Sets uint8

const (
	// Both sends the X-RateLimit-* set and the draft's set (the default: the
	// clients of X-RateLimit-* keep working).
	Both Sets = iota
	// X sends only the X-RateLimit-* set (setting value "x").
	X
	// IETF sends only the draft's RateLimit-Policy and RateLimit (setting
	// value "ietf").
	IETF
)

// ParseSets reads a RATE_LIMIT_HEADERS value: x, ietf or both.
func ParseSets(s string) (Sets, error) {
	switch s {
	case "both":
		return Both, nil
	case "x":
		return X, nil
	case "ietf":
		return IETF, nil
	}
	return Both, fmt.Errorf("%q is not one of x (X-RateLimit-* only), ietf (RateLimit-Policy and RateLimit only), both", s)
}

// String returns the setting value of s.
func (s Sets) String() string {
	switch s {
	case X:
		return "x"
	case IETF:
		return "ietf"
	}
	return "both"
}

// SendsX reports whether s includes the X-RateLimit-* set.
func (s Sets) SendsX() bool { return s != IETF }

// SendsIETF reports whether s includes RateLimit-Policy and RateLimit.
func (s Sets) SendsIETF() bool { return s != X }

// Policy is one quota policy item of RateLimit-Policy.
type Policy struct {
	// Name identifies the policy; RateLimit names it again.
	Name string
	// Quota is q: the quota units (requests) the policy allocates, ≥ 0.
	Quota int64
	// Window is w, in seconds; 0 leaves it out (the draft's w is non-zero).
	Window int64
}

// ServiceLimit is one service limit item of RateLimit.
type ServiceLimit struct {
	// Name is the policy's name, as in RateLimit-Policy.
	Name string
	// Remaining is r: the available quota, ≥ 0.
	Remaining int64
	// Reset is t, in seconds, ≥ 0: the effective window, within which the
	// client can use no more than Remaining. Negative leaves it out.
	Reset int64
}

// FormatPolicy returns the RateLimit-Policy field value of ps, one list
// member per policy, in order.
func FormatPolicy(ps ...Policy) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		writeString(&b, p.Name)
		writeParam(&b, "q", p.Quota)
		if p.Window > 0 {
			writeParam(&b, "w", p.Window)
		}
	}
	return b.String()
}

// FormatServiceLimit returns the RateLimit field value of ls, one list
// member per service limit, in order.
func FormatServiceLimit(ls ...ServiceLimit) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		writeString(&b, l.Name)
		writeParam(&b, "r", l.Remaining)
		if l.Reset >= 0 {
			writeParam(&b, "t", l.Reset)
		}
	}
	return b.String()
}

// maxInteger is the largest Integer a structured field can hold (RFC 9651
// §3.3.1: at most 15 decimal digits).
const maxInteger = 999_999_999_999_999

// writeParam writes the parameter ;key=n, n an Integer clamped to
// 0..maxInteger: every parameter the draft defines is non-negative, and a
// larger number could not be serialized at all. Keys are the draft's
// lowercase names.
func writeParam(b *strings.Builder, key string, n int64) {
	b.WriteByte(';')
	b.WriteString(key)
	b.WriteByte('=')
	b.WriteString(strconv.FormatInt(min(max(n, 0), maxInteger), 10))
}

// writeString writes s as a structured-field String (RFC 9651 §4.1.6):
// quoted, with '"' and '\' escaped by a backslash. A String holds only
// printable ASCII (0x20-0x7E), so every other byte, and '%' so that the
// result is unambiguous, is written percent-encoded (%XX, as in a URL):
// "é" becomes "%C3%A9".
func writeString(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e || c == '%':
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0x0f])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// Window returns the w of a policy enforcing l, in whole seconds (rounded up,
// at least 1): the window of the window algorithms and gcra; for a token
// bucket, the time its refill takes to fill the whole capacity from empty,
// Limit/refill rate, so that q per w is the bucket's sustained rate.
func Window(l algorithms.Limit) int64 {
	if l.Algorithm == algorithms.TokenBucket {
		rate := l.Refill()
		if l.RefillRate <= 0 {
			// The default rate is Limit per window (per minute without
			// one): the window itself, exactly.
			w := l.Window
			if w <= 0 {
				w = algorithms.DefaultTokenBucketWindow
			}
			return Seconds(w)
		}
		s := float64(l.Limit) / rate
		if r := math.Round(s); math.Abs(s-r) <= 1e-9*r {
			s = r // 100/(100/3.0) is 3.0000000000000004, not 4 seconds
		}
		return max(int64(min(math.Ceil(s), maxInteger)), 1)
	}
	return Seconds(l.Window)
}

// Seconds returns d in whole seconds, rounded up, at least 1: a window, as
// the draft's w (which is non-zero).
func Seconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}
