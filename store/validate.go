package store

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/throttle-rl/throttle/algorithms"
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
	return &refusal{reason: fmt.Sprintf(format, args...)}
}

// refusal is the store's refusal of a value, of kind ErrInvalid; its message
// is only the reason, ready to show a client. A rule's limit is refused by
// its owner, algorithms.Limit.Validate: cause is then the engine's error
// (errors.Is algorithms.ErrInvalid too), and its message is the reason.
type refusal struct {
	reason string
	cause  error
}

func (e *refusal) Error() string        { return e.reason }
func (e *refusal) Is(target error) bool { return target == ErrInvalid }
func (e *refusal) Unwrap() error        { return e.cause }

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

	if err := CheckDomain(c.Domain); err != nil {
		return c, err
	}

	if c.DefaultAlgorithm == "" {
		c.DefaultAlgorithm = algorithms.SlidingWindow
	}
	if _, err := algorithms.ParseAlgorithm(string(c.DefaultAlgorithm)); err != nil {
		return c, invalid("default_algorithm must be %s", algorithms.Names())
	}
	return c, nil
}

// CheckDomain says why domain cannot be a client's Envoy domain (an error
// wrapping ErrInvalid); "" (no domain) can.
func CheckDomain(domain string) error {
	if domain != "" && !domainRE.MatchString(domain) {
		return invalid("domain must be 1 to %d characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit", maxDomainLen)
	}
	return nil
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

// MaxRateLimits is the most limits a rule's RateLimits may have (as a
// descriptor's rate_limits in the YAML).
const MaxRateLimits = 16

// normalizeRule checks r; the algorithm of its limit (of each of its
// RateLimits) must already be set. A limit is the engine's to judge
// (algorithms.Limit.Validate); the store adds only what its columns and
// Envoy need: a window of whole seconds, and at most MaxUint32 for a rule
// with descriptors; and, for RateLimits, what the limits must be together.
// With RateLimits, the rule's Limit and AlwaysCount are those of
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
		l, err := normalizeLimit(r.Limit, descriptors, "")
		if err != nil {
			return r, err
		}
		r.Limit = l
	} else {
		if err := checkRateLimits(r); err != nil {
			return r, err
		}
		r.RateLimits = slices.Clone(r.RateLimits)
		for i := range r.RateLimits {
			l, err := normalizeLimit(r.RateLimits[i].Limit, descriptors, fmt.Sprintf("rate_limits[%d]: ", i))
			if err != nil {
				return r, err
			}
			r.RateLimits[i].Limit = l
		}
		if err := checkShared(r.RateLimits); err != nil {
			return r, err
		}
		r.Limit, r.AlwaysCount = r.RateLimits[0].Limit, r.RateLimits[0].AlwaysCount
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
	return r, checkReserve(r)
}

// checkReserve checks r's Reserve against its descriptors and limits.
func checkReserve(r Rule) error {
	v := r.Reserve
	switch {
	case v == nil:
		return nil
	case len(r.Descriptors) == 0:
		return invalid("reserve is only for rules with descriptors: it reserves on Envoy's calls")
	case v.Handle == "":
		return invalid("reserve.handle is required: the key of the request's descriptor entry that names the request (as request_id)")
	case len(v.Handle) > maxDescriptorText || !cleanText(v.Handle):
		return invalid("reserve.handle must be UTF-8 text of at most %d bytes", maxDescriptorText)
	case slices.ContainsFunc(r.Descriptors, func(d DescriptorEntry) bool { return d.Key == v.Handle }):
		return invalid("reserve.handle %q is a key of the rule's descriptors: the handle entry is taken out before matching", v.Handle)
	case v.TTL < time.Second || v.TTL%time.Second != 0 || v.TTL > algorithms.MaxHoldTTL:
		return invalid("reserve.ttl must be a whole number of seconds from 1 to %d", int64(algorithms.MaxHoldTTL/time.Second))
	}
	for _, l := range r.Limits() {
		if v.Hits < 1 || v.Hits > l.Limit.Limit {
			return invalid("reserve.hits %d must be between 1 and the limit, %d", v.Hits, l.Limit.Limit)
		}
	}
	return nil
}

// normalizeLimit checks one limit of a rule; at prefixes its messages
// ("rate_limits[1]: "). A refill rate its algorithm does not use is
// dropped.
func normalizeLimit(l algorithms.Limit, descriptors bool, at string) (algorithms.Limit, error) {
	if err := l.Validate(); err != nil {
		return l, &refusal{reason: at + err.Error(), cause: err}
	}
	if l.Window%time.Second != 0 {
		return l, invalid("%swindow must be a whole number of seconds", at)
	}
	if l.Algorithm != algorithms.TokenBucket {
		l.RefillRate = 0 // does not apply: ignored, as REST clients send one body for all algorithms
	}
	l.Accuracy, _ = algorithms.ParseAccuracy(string(l.Accuracy)) // "exact" is Exact; Validate refused the rest
	if descriptors && l.Limit > math.MaxUint32 {
		return l, invalid("%slimit of a rule with descriptors must be at most %d (Envoy's requests_per_unit)", at, uint32(math.MaxUint32))
	}
	return l, nil
}

// checkRateLimits checks what a rule's RateLimits must be before their
// limits are: only with descriptors, at most MaxRateLimits, names valid and
// unique.
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
	return nil
}

// checkShared refuses two limits the engine would count as one (same
// algorithm, limit, window and refill rate: one counter, whatever their
// accuracy, as an approximate limit syncs to the counter an exact one uses).
func checkShared(ls []RuleLimit) error {
	counter := func(l algorithms.Limit) algorithms.Limit { l.Accuracy = algorithms.Exact; return l }
	for i, l := range ls {
		for j := range i {
			if counter(l.Limit) == counter(ls[j].Limit) {
				return invalid("rate_limits[%d]: same algorithm, limit, window and refill_rate as rate_limits[%d]: the two would count against one counter", i, j)
			}
		}
	}
	return nil
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
