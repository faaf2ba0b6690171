package xdsconfig

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/throttle-rl/throttle/descriptors"
)

// Reservations is the reservation overlay (setting RESERVATION_OVERLAY):
// reserve set on limits of domains that come over xDS, whose control plane
// (Envoy Gateway, and so Envoy AI Gateway) has no field for it.
//
// Envoy Gateway turns a client selector of a BackendTrafficPolicy rule into
// one descriptor entry, keyed rule-<rule>-match-<selector> (a Distinct
// header selector: its key alone, any value), nested in selector order
// under the route's (or shared rule's) descriptor; the rule's limit is on
// the last. A Distinct selector on x-request-id makes such an entry of
// every request's own id. An overlay entry names that key as the handle:
// wherever the domain has a descriptor of that key and no value, the
// descriptor is taken out of the tree (its limit and its own descriptors
// move up to its parent) and every limit it held gets reserve {hits, ttl,
// handle: the key}. Envoy still sends the entry; Throttle takes it out
// before matching (descriptors.Domain.Match), so the counter is the
// rule's, not the request's, and the entry's value names the hold.
//
// An entry that cannot apply to a response (no such descriptor, a parent
// with a limit of its own, hits over the limit) is left out of it, with a
// warning: the control plane's configuration is loaded without it, never
// refused for it.
type Reservations struct {
	Entries []Reservation `json:"reservations"`
}

// Reservation is one entry of the overlay.
type Reservation struct {
	// Domain is the xDS domain (Envoy Gateway: the listener's, such as
	// default/eg/http, or a shared rule's). Required.
	Domain string `json:"domain"`
	// Handle is the key of the descriptor that carries the request's id
	// (Envoy Gateway: rule-<rule>-match-<selector> of the Distinct
	// x-request-id selector). Required.
	Handle string `json:"handle"`
	// Under, optional, limits the entry to the descriptors below the
	// top-level descriptor of this key (Envoy Gateway: a route's, or a
	// shared rule's); empty: all of the domain.
	Under string `json:"under,omitempty"`
	// Hits is what the request path holds. Required, ≥ 1.
	Hits int64 `json:"hits"`
	// TTL is how long a hold lasts: seconds, or a duration such as 60s.
	// Required, at most MAX_RESERVATION_TTL.
	TTL ttl `json:"ttl"`
}

// ttl reads seconds or a duration string.
type ttl time.Duration

func (t *ttl) UnmarshalJSON(b []byte) error {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case string:
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("ttl %q must be a number of seconds or a duration such as 60s", v)
		}
		*t = ttl(d)
	case float64:
		*t = ttl(time.Duration(v * float64(time.Second)))
	default:
		return fmt.Errorf("ttl %v must be a number of seconds or a duration such as 60s", v)
	}
	return nil
}

// ParseReservations reads an overlay file strictly: unknown keys, missing
// fields and a ttl over maxTTL are errors naming the file and the entry.
func ParseReservations(name string, data []byte, maxTTL time.Duration) (*Reservations, error) {
	var r Reservations
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var errs []error
	for i, e := range r.Entries {
		at := fmt.Sprintf("%s: reservations[%d]", name, i)
		switch d := time.Duration(e.TTL); {
		case e.Domain == "":
			errs = append(errs, fmt.Errorf("%s: domain is required", at))
		case e.Handle == "":
			errs = append(errs, fmt.Errorf("%s: handle is required: the descriptor key of the Distinct x-request-id selector (Envoy Gateway: rule-<rule>-match-<selector>)", at))
		case e.Hits < 1:
			errs = append(errs, fmt.Errorf("%s: hits %d must be at least 1", at, e.Hits))
		case d <= 0 || d%time.Second != 0:
			errs = append(errs, fmt.Errorf("%s: ttl %s must be a whole number of seconds above 0", at, d))
		case d > maxTTL:
			errs = append(errs, fmt.Errorf("%s: ttl %s is longer than MAX_RESERVATION_TTL, %s", at, d, maxTTL))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &r, nil
}

// apply sets the entries of r for f's domain on f, and returns why those
// that did not apply did not.
func (r *Reservations) apply(f *descriptors.File) (notes []string) {
	if r == nil {
		return nil
	}
	for i, e := range r.Entries {
		if e.Domain != f.Domain {
			continue
		}
		ds, n, err := e.lift(f.Descriptors, true)
		switch {
		case err != nil:
			notes = append(notes, fmt.Sprintf("reservations[%d] (domain %q, handle %q): %v", i, e.Domain, e.Handle, err))
		case n == 0:
			notes = append(notes, fmt.Sprintf("reservations[%d] (domain %q, handle %q): no descriptor of key %q without a value", i, e.Domain, e.Handle, e.Handle))
		default:
			f.Descriptors = ds
		}
	}
	return notes
}

// lift returns ds with every descriptor keyed e.Handle (no value) taken
// out and its limit and descriptors moved up, and how many it took out;
// ds is not changed. top says ds are a domain's top-level descriptors.
func (e Reservation) lift(ds []descriptors.Descriptor, top bool) ([]descriptors.Descriptor, int, error) {
	out := make([]descriptors.Descriptor, 0, len(ds))
	lifted := 0
	for _, d := range ds {
		if top && e.Under != "" && d.Key != e.Under {
			out = append(out, d)
			continue
		}
		children, n, err := e.lift(d.Descriptors, false)
		if err != nil {
			return nil, 0, err
		}
		d.Descriptors = children
		lifted += n
		var h *descriptors.Descriptor
		if i := handleIndex(d.Descriptors, e.Handle); i >= 0 {
			h = &d.Descriptors[i]
			d.Descriptors = append(d.Descriptors[:i:i], d.Descriptors[i+1:]...)
		}
		if h != nil {
			if err := e.moveUp(&d, *h); err != nil {
				return nil, 0, err
			}
			lifted++
		}
		out = append(out, d)
	}
	if top {
		if i := handleIndex(out, e.Handle); i >= 0 {
			h := out[i]
			if h.RateLimit != nil {
				return nil, 0, errors.New("a top-level descriptor has the limit: it has no parent to move it to")
			}
			rest := append(out[:i:i], out[i+1:]...)
			moved, err := e.withReserve(h.Descriptors)
			if err != nil {
				return nil, 0, err
			}
			out = append(rest, moved...)
			lifted++
		}
	}
	return out, lifted, nil
}

// moveUp moves h, a handle descriptor, into its parent p: its limit (with
// reserve) and its descriptors (whose limits reserve too).
func (e Reservation) moveUp(p *descriptors.Descriptor, h descriptors.Descriptor) error {
	if h.RateLimit != nil {
		if p.RateLimit != nil {
			return fmt.Errorf("descriptor %q has a limit of its own and one under %q", p.Key, e.Handle)
		}
		l, err := e.reserve(*h.RateLimit)
		if err != nil {
			return err
		}
		p.RateLimit, p.ShadowMode, p.QuotaMode, p.DetailedMetric, p.Metadata = &l, h.ShadowMode, h.QuotaMode, h.DetailedMetric, h.Metadata
	}
	moved, err := e.withReserve(h.Descriptors)
	if err != nil {
		return err
	}
	for _, m := range moved {
		for _, s := range p.Descriptors {
			if s.Key == m.Key && s.Value == m.Value {
				return fmt.Errorf("descriptor %q has a descriptor %s both beside and under %q", p.Key, segment(m), e.Handle)
			}
		}
	}
	p.Descriptors = append(p.Descriptors, moved...)
	return nil
}

// withReserve returns a copy of ds whose every limit, at any depth,
// reserves.
func (e Reservation) withReserve(ds []descriptors.Descriptor) ([]descriptors.Descriptor, error) {
	out := make([]descriptors.Descriptor, len(ds))
	for i, d := range ds {
		if d.RateLimit != nil {
			l, err := e.reserve(*d.RateLimit)
			if err != nil {
				return nil, err
			}
			d.RateLimit = &l
		}
		var err error
		if d.Descriptors, err = e.withReserve(d.Descriptors); err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// reserve returns l with the entry's reserve.
func (e Reservation) reserve(l descriptors.Limit) (descriptors.Limit, error) {
	if l.Unlimited || int64(l.RequestsPerUnit) < e.Hits {
		return l, fmt.Errorf("hits %d are more than the limit under it, %d", e.Hits, l.RequestsPerUnit)
	}
	l.Reserve = &descriptors.Reserve{Hits: e.Hits, TTL: time.Duration(e.TTL), Handle: e.Handle}
	return l, nil
}

func handleIndex(ds []descriptors.Descriptor, key string) int {
	for i, d := range ds {
		if d.Key == key && d.Value == "" {
			return i
		}
	}
	return -1
}

// segment names a descriptor as a composite key does: key or key_value.
func segment(d descriptors.Descriptor) string {
	if d.Value == "" {
		return d.Key
	}
	return strings.Join([]string{d.Key, d.Value}, "_")
}
