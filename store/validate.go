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

// normalizeRule checks r; the algorithm must already be set.
func normalizeRule(r Rule) (Rule, error) {
	if !ruleNameRE.MatchString(r.Name) {
		if r.Name == "" {
			return r, invalid("name is required")
		}
		return r, invalid("name must be 1 to %d characters of A-Z, a-z, 0-9, '_', '.', ':', '-'", maxNameLen)
	}
	if !ValidAlgorithm(r.Algorithm) {
		return r, invalid("algorithm must be %s", algorithmList())
	}
	if r.Limit <= 0 {
		return r, invalid("limit must be greater than 0")
	}
	switch {
	case r.Window < 0:
		return r, invalid("window must not be negative")
	case r.Window%time.Second != 0:
		return r, invalid("window must be a whole number of seconds")
	case r.Window == 0 && r.Algorithm != TokenBucket:
		return r, invalid("window is required for %s", r.Algorithm)
	}
	switch {
	case math.IsNaN(r.RefillRate) || math.IsInf(r.RefillRate, 0) || r.RefillRate < 0:
		return r, invalid("refill_rate must be a number ≥ 0")
	case r.Algorithm != TokenBucket:
		r.RefillRate = 0 // does not apply: ignored, as REST clients send one body for all algorithms
	}
	if len(r.Descriptors) > 0 && r.Limit > math.MaxUint32 {
		return r, invalid("limit of a rule with descriptors must be at most %d (Envoy's requests_per_unit)", uint32(math.MaxUint32))
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
