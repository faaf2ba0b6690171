// Package inputsize is the one rule on the size of what a caller names in
// a request: a domain, descriptors, their entries' keys and values, a limit
// override's window, a REST check's identifier and rule. Every door calls
// it before anything is matched, counted or named in a stat: the gRPC
// rate-limit service (and POST /json, which is that service in JSON), the
// REST counters and check bodies, and the xDS configuration source. What
// is over a cap is refused (INVALID_ARGUMENT, HTTP 400) by an *Error that
// names the part.
//
// The figures (docs/api.md, "Input sizes"): each string at most MaxString
// bytes; one descriptor's keys and values at most MaxDescriptorBytes
// together; a request at most Limits.Descriptors descriptors of at most
// Limits.Entries entries; a limit override's window at most
// Limits.OverrideWindow. A request the rule admits thus holds at most
// 64 × 4 KiB of names by default, and a counter it makes has a key of at
// most about 4 KiB that lives at most 30 days.
package inputsize

import (
	"fmt"
	"hash/fnv"
	"time"
	"unicode/utf8"
)

// The fixed caps, in bytes.
const (
	// MaxString is the most bytes of a domain, a descriptor entry's key or
	// value, a REST identifier or rule name: Envoy's values are header
	// values, paths and addresses, far shorter.
	MaxString = 1024
	// MaxDescriptorBytes is the most bytes of one descriptor's keys and
	// values together: what one counter's key and one stats name hold.
	MaxDescriptorBytes = 4096
)

// The defaults of Limits' fields (settings MAX_DESCRIPTORS_PER_REQUEST,
// MAX_DESCRIPTOR_ENTRIES, MAX_OVERRIDE_WINDOW). Envoy sends one descriptor
// per matching rate_limits action list and one entry per action, a
// handful of each in real configurations; REST rules have at most 16
// entries. 30 days is the reference's MONTH.
const (
	DefaultDescriptors    = 64
	DefaultEntries        = 32
	DefaultOverrideWindow = 30 * 24 * time.Hour
)

// Limits are the caps a deployment sets; a zero field means its default.
type Limits struct {
	Descriptors    int           // descriptors of one request
	Entries        int           // entries of one descriptor
	OverrideWindow time.Duration // window of a limit override
}

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.Descriptors <= 0 {
		l.Descriptors = DefaultDescriptors
	}
	if l.Entries <= 0 {
		l.Entries = DefaultEntries
	}
	if l.OverrideWindow <= 0 {
		l.OverrideWindow = DefaultOverrideWindow
	}
	return l
}

// The reasons of an Error, one per cap (a metric label: a fixed set).
const (
	ReasonDescriptors     = "descriptors"
	ReasonEntries         = "entries"
	ReasonString          = "string"
	ReasonDescriptorBytes = "descriptor_bytes"
	ReasonOverrideWindow  = "override_window"
)

// Reasons are every reason, in a fixed order.
var Reasons = []string{ReasonDescriptors, ReasonEntries, ReasonString, ReasonDescriptorBytes, ReasonOverrideWindow}

// Error is a part of a request over its cap. Its message names the part,
// its size and the cap (and the setting that sets it, if one does).
type Error struct {
	Reason string // one of Reasons
	msg    string
}

func (e *Error) Error() string { return e.msg }

func tooLarge(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, msg: fmt.Sprintf(format, args...)}
}

// String refuses s, the part named what ("domain", "identifier"), when it
// is longer than MaxString bytes.
func String(what, s string) error {
	if len(s) > MaxString {
		return tooLarge(ReasonString, "%s is %d bytes, longer than the %d allowed", what, len(s), MaxString)
	}
	return nil
}

// Descriptor is what the rule reads of one descriptor of a request.
type Descriptor interface {
	// Len is the number of entries.
	Len() int
	// Entry returns the key and value of entry j.
	Entry(j int) (key, value string)
	// OverrideWindow is the window of the descriptor's limit override; 0
	// when it has none.
	OverrideWindow() time.Duration
}

// Request refuses a request on domain of n descriptors (at(i) is the
// i-th) over a cap: the count first, so an oversized request costs no
// more than reading as far as the cap. Nothing else is checked (empty
// keys and the like are the door's).
func (l Limits) Request(domain string, n int, at func(i int) Descriptor) error {
	if err := String("domain", domain); err != nil {
		return err
	}
	if n > l.Descriptors {
		return tooLarge(ReasonDescriptors, "rate limit request has %d descriptors, more than the %d allowed (MAX_DESCRIPTORS_PER_REQUEST)", n, l.Descriptors)
	}
	for i := range n {
		if err := l.descriptor(i, at(i)); err != nil {
			return err
		}
	}
	return nil
}

func (l Limits) descriptor(i int, d Descriptor) error {
	n := d.Len()
	if n > l.Entries {
		return tooLarge(ReasonEntries, "descriptor %d has %d entries, more than the %d allowed (MAX_DESCRIPTOR_ENTRIES)", i, n, l.Entries)
	}
	total := 0
	for j := range n {
		k, v := d.Entry(j)
		switch { // messages made only when refused: this runs on every request
		case len(k) > MaxString:
			return String(fmt.Sprintf("descriptor %d entry %d key", i, j), k)
		case len(v) > MaxString:
			return String(fmt.Sprintf("descriptor %d entry %d value", i, j), v)
		}
		total += len(k) + len(v)
	}
	if total > MaxDescriptorBytes {
		return tooLarge(ReasonDescriptorBytes, "descriptor %d has %d bytes of keys and values, more than the %d allowed", i, total, MaxDescriptorBytes)
	}
	if w := d.OverrideWindow(); w > l.OverrideWindow {
		return tooLarge(ReasonOverrideWindow, "descriptor %d limit override: a window of %s, longer than the %s allowed (MAX_OVERRIDE_WINDOW)", i, days(w), days(l.OverrideWindow))
	}
	return nil
}

// days writes a window in days when it is whole days, else as a Duration.
func days(w time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case w == day:
		return "1 day"
	case w%day == 0:
		return fmt.Sprintf("%d days", w/day)
	}
	return w.String()
}

// MaxName is the most bytes of a metric label made of a request's parts (a
// descriptor's stats key with its values, detailed_metric's): ShortName
// shortens a longer one.
const MaxName = 256

// ShortName returns name when it has at most MaxName bytes, else its first
// bytes (whole runes) and '_' and 16 hex digits of a hash of all of it,
// MaxName bytes at most: two long names stay apart, and one is always
// shortened alike.
func ShortName(name string) string {
	if len(name) <= MaxName {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	const suffix = 1 + 16
	cut := MaxName - suffix
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return fmt.Sprintf("%s_%016x", name[:cut], h.Sum64())
}
