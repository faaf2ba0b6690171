package store

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Algorithm names a rule or client may use: the engine's algorithms
// (algorithms.Algorithms). store does not import the engine (DESIGN.md: it
// imports only migrations), so TestAlgorithmsMatchEngine keeps these names,
// their order and the messages that list them equal to the engine's.
const (
	FixedWindow   = "fixed_window"
	SlidingWindow = "sliding_window"
	TokenBucket   = "token_bucket"
	GCRA          = "gcra"
)

// Field limits.
const (
	maxNameLen        = 100
	maxEmailLen       = 254
	maxDomainLen      = 100
	maxIdentifierLen  = 256
	maxReasonLen      = 1000
	maxDescriptors    = 16
	maxDescriptorText = 256
)

var (
	domainRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,99}$`)
	ruleNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)
)

func invalid(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}

// invalidError is a refusal of kind ErrInvalid whose message is only the
// reason, ready to show a client.
type invalidError string

func (e invalidError) Error() string        { return string(e) }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }

// algorithmNames lists the algorithms in the engine's documentation order.
func algorithmNames() []string {
	return []string{FixedWindow, SlidingWindow, TokenBucket, GCRA}
}

// ValidAlgorithm reports whether name is one of the engine's algorithms.
func ValidAlgorithm(name string) bool {
	return slices.Contains(algorithmNames(), name)
}

// algorithmList spells the algorithms for a message, exactly as
// algorithms.Names does: "fixed_window, sliding_window, token_bucket or gcra".
func algorithmList() string {
	names := algorithmNames()
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}

// normalizeClient checks c and returns it cleaned up: name trimmed, email
// trimmed and lower-cased, default algorithm defaulted. The domain is checked
// only when given.
func normalizeClient(c Client) (Client, error) {
	c.Name = strings.TrimSpace(c.Name)
	switch n := utf8.RuneCountInString(c.Name); {
	case n == 0:
		return c, invalid("name is required")
	case n > maxNameLen:
		return c, invalid("name is longer than %d characters", maxNameLen)
	case !cleanText(c.Name):
		return c, invalid("name is not valid UTF-8 text")
	}

	c.Email = strings.ToLower(strings.TrimSpace(c.Email))
	if c.Email == "" {
		return c, invalid("email is required")
	}
	if err := checkEmail(c.Email); err != nil {
		return c, err
	}

	if c.Domain != "" && !domainRE.MatchString(c.Domain) {
		return c, invalid("domain must be 1 to %d characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit", maxDomainLen)
	}

	if c.DefaultAlgorithm == "" {
		c.DefaultAlgorithm = SlidingWindow
	}
	if !ValidAlgorithm(c.DefaultAlgorithm) {
		return c, invalid("default_algorithm must be %s", algorithmList())
	}
	return c, nil
}

func checkEmail(email string) error {
	if len(email) > maxEmailLen {
		return invalid("email is longer than %d characters", maxEmailLen)
	}
	local, host, ok := strings.Cut(email, "@")
	if !ok || strings.Contains(host, "@") {
		return invalid("email must contain exactly one '@'")
	}
	if local == "" || host == "" || strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") {
		return invalid("email must look like name@example.com")
	}
	for _, r := range email {
		if r <= ' ' || r == 0x7f || r == '<' || r == '>' || r == ',' || r == ';' {
			return invalid("email contains a character that is not allowed")
		}
	}
	if !utf8.ValidString(email) {
		return invalid("email is not valid UTF-8")
	}
	return nil
}

// slug turns a client name into a domain: lower-case letters and digits, runs
// of anything else become one '-' ("My App!" → "my-app"). Room is left for a
// "-N" suffix. A name with no letters or digits gives "client".
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		default:
			dash = true
		}
	}
	s := b.String()
	const room = maxDomainLen - 8 // "-" + up to 7 digits
	if len(s) > room {
		s = strings.TrimRight(s[:room], "-")
	}
	if s == "" {
		return "client"
	}
	return s
}

// MaxRateLimits is the most limits a rule's RateLimits may have (as a
// descriptor's rate_limits in the YAML).
const MaxRateLimits = 16

// normalizeRule checks r; the algorithm (of each of its RateLimits) must
// already be set. With RateLimits, the rule's own limit fields are set from
// RateLimits[0].
func normalizeRule(r Rule) (Rule, error) {
	if !ruleNameRE.MatchString(r.Name) {
		if r.Name == "" {
			return r, invalid("name is required")
		}
		return r, invalid("name must be 1 to %d characters of A-Z, a-z, 0-9, '_', '.', ':', '-'", maxNameLen)
	}
	descriptors := len(r.Descriptors) > 0
	if len(r.RateLimits) == 0 {
		l, err := normalizeLimit(RuleLimit{Algorithm: r.Algorithm, Limit: r.Limit, Window: r.Window, RefillRate: r.RefillRate, AlwaysCount: r.AlwaysCount}, descriptors, "")
		if err != nil {
			return r, err
		}
		r.RefillRate = l.RefillRate
	} else {
		if err := checkRateLimits(r); err != nil {
			return r, err
		}
		r.RateLimits = slices.Clone(r.RateLimits)
		for i, l := range r.RateLimits {
			l, err := normalizeLimit(l, descriptors, fmt.Sprintf("rate_limits[%d]: ", i))
			if err != nil {
				return r, err
			}
			r.RateLimits[i] = l
		}
		first := r.RateLimits[0]
		r.Algorithm, r.Limit, r.Window, r.RefillRate, r.AlwaysCount = first.Algorithm, first.Limit, first.Window, first.RefillRate, first.AlwaysCount
	}
	if len(r.Descriptors) > maxDescriptors {
		return r, invalid("descriptors has more than %d entries", maxDescriptors)
	}
	for i, d := range r.Descriptors {
		switch {
		case d.Key == "":
			return r, invalid("descriptors[%d].key is required", i)
		case len(d.Key) > maxDescriptorText || len(d.Value) > maxDescriptorText:
			return r, invalid("descriptors[%d] key and value must be at most %d bytes", i, maxDescriptorText)
		case !cleanText(d.Key) || !cleanText(d.Value):
			return r, invalid("descriptors[%d] is not valid UTF-8 text", i)
		}
	}
	if len(r.Descriptors) == 0 {
		r.Descriptors = nil
	}
	return r, nil
}

// checkRateLimits checks what a rule's RateLimits must be together: only
// with descriptors, at most MaxRateLimits, names valid and unique, and no
// two limits that would count against one counter.
func checkRateLimits(r Rule) error {
	if len(r.Descriptors) == 0 {
		return invalid("rate_limits is only for rules with descriptors (Envoy requests); a rule for /check has one limit")
	}
	if len(r.RateLimits) > MaxRateLimits {
		return invalid("rate_limits has more than %d limits", MaxRateLimits)
	}
	names := map[string]int{}
	for i, l := range r.RateLimits {
		if l.Name == "" {
			continue
		}
		if !ruleNameRE.MatchString(l.Name) {
			return invalid("rate_limits[%d]: name must be 1 to %d characters of A-Z, a-z, 0-9, '_', '.', ':', '-'", i, maxNameLen)
		}
		if j, ok := names[l.Name]; ok {
			return invalid("rate_limits[%d]: name %q is already the name of rate_limits[%d]", i, l.Name, j)
		}
		names[l.Name] = i
	}
	for i, l := range r.RateLimits {
		for j := range i {
			o := r.RateLimits[j]
			if l.Algorithm == o.Algorithm && l.Limit == o.Limit && l.Window == o.Window && (l.Algorithm != TokenBucket || l.RefillRate == o.RefillRate) {
				return invalid("rate_limits[%d]: same algorithm, limit, window and refill_rate as rate_limits[%d]: the two would count against one counter", i, j)
			}
		}
	}
	return nil
}

// normalizeLimit checks one limit of a rule; at prefixes its messages
// ("rate_limits[1]: "). A refill rate given with a window algorithm or gcra
// is dropped.
func normalizeLimit(l RuleLimit, descriptors bool, at string) (RuleLimit, error) {
	if !ValidAlgorithm(l.Algorithm) {
		return l, invalid("%salgorithm must be %s", at, algorithmList())
	}
	if l.Limit <= 0 {
		return l, invalid("%slimit must be greater than 0", at)
	}
	switch {
	case l.Window < 0:
		return l, invalid("%swindow must not be negative", at)
	case l.Window%time.Second != 0:
		return l, invalid("%swindow must be a whole number of seconds", at)
	case l.Window == 0 && l.Algorithm != TokenBucket:
		return l, invalid("%swindow is required for %s", at, l.Algorithm)
	}
	switch {
	case math.IsNaN(l.RefillRate) || math.IsInf(l.RefillRate, 0) || l.RefillRate < 0:
		return l, invalid("%srefill_rate must be a number ≥ 0", at)
	case l.Algorithm != TokenBucket:
		l.RefillRate = 0 // does not apply: ignored, as REST clients send one body for all algorithms
	}
	if descriptors && l.Limit > math.MaxUint32 {
		return l, invalid("%slimit of a rule with descriptors must be at most %d (Envoy's requests_per_unit)", at, uint32(math.MaxUint32))
	}
	return l, nil
}

func checkExemption(e Exemption) error {
	switch n := utf8.RuneCountInString(e.Identifier); {
	case n == 0:
		return invalid("identifier is required")
	case n > maxIdentifierLen:
		return invalid("identifier is longer than %d characters", maxIdentifierLen)
	case !cleanText(e.Identifier):
		return invalid("identifier is not valid UTF-8 text")
	}
	if utf8.RuneCountInString(e.Reason) > maxReasonLen {
		return invalid("reason is longer than %d characters", maxReasonLen)
	}
	if !cleanText(e.Reason) {
		return invalid("reason is not valid UTF-8 text")
	}
	return nil
}

// cleanText reports whether s is valid UTF-8 without NUL bytes, which
// PostgreSQL cannot store in TEXT.
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
