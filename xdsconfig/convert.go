package xdsconfig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/inputsize"
)

// Load converts the RateLimitConfig resources of one xDS response into
// Throttle's configuration, with the reference service's meaning: each
// resource is a descriptor file of its own (named `RateLimitConfig "name"`
// in errors), loaded and checked by descriptors.Load exactly as YAML files
// are, so MERGE_DOMAIN_CONFIG (opts) applies across resources as across
// files. The resources are taken in name order (a control plane's cache
// sends them in any order). The error names each resource and the place in
// it of every problem, without file lines, which a resource has none of.
func Load(opts descriptors.Options, resources []*anypb.Any) (*descriptors.Config, error) {
	cfgs, err := unmarshal(resources)
	if err != nil {
		return nil, err
	}
	return loadConfigs(opts, cfgs, nil, nil)
}

// loadConfigs is Load of the resources unmarshal decoded, with the
// reservation overlay res (optional) set on them; log (optional) warns of
// each overlay entry that did not apply.
func loadConfigs(opts descriptors.Options, cfgs []*rlsconf.RateLimitConfig, res *Reservations, log *slog.Logger) (*descriptors.Config, error) {
	srcs := make([]descriptors.Source, len(cfgs))
	for i, c := range cfgs {
		if err := checkSizes(c); err != nil {
			return nil, fmt.Errorf("%s: %w", resourceName(c, i), err)
		}
		f := yamlFileOf(c)
		for _, note := range res.apply(&f) {
			if log != nil {
				log.Warn("reservation overlay entry left out of an xDS configuration (RESERVATION_OVERLAY)", "resource", resourceName(c, i), "why", note)
			}
		}
		data, err := encodeYAML(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", resourceName(c, i), err)
		}
		srcs[i] = descriptors.Source{Name: resourceName(c, i), Data: data}
	}
	c, err := descriptors.Load(opts, srcs...)
	if err != nil {
		return nil, withoutLines(err)
	}
	return c, nil
}

// checkSizes refuses a resource whose domain, or a descriptor's key or
// value, is over the input-size rule's cap (package inputsize), as every
// door refuses a request's: the error names the place.
func checkSizes(c *rlsconf.RateLimitConfig) error {
	if err := inputsize.String("domain", c.GetDomain()); err != nil {
		return err
	}
	return checkDescriptorSizes("", c.GetDescriptors())
}

// checkDescriptorSizes is checkSizes of descriptors under path ("" at the
// top, else "descriptors[0] › ").
func checkDescriptorSizes(path string, ds []*rlsconf.RateLimitDescriptor) error {
	for i, d := range ds {
		if len(d.GetKey()) <= inputsize.MaxString && len(d.GetValue()) <= inputsize.MaxString && len(d.GetDescriptors()) == 0 {
			continue // the common case, no path made
		}
		at := path + "descriptors[" + strconv.Itoa(i) + "] › "
		if err := inputsize.String(at+"key", d.GetKey()); err != nil {
			return err
		}
		if err := inputsize.String(at+"value", d.GetValue()); err != nil {
			return err
		}
		if err := checkDescriptorSizes(at, d.GetDescriptors()); err != nil {
			return err
		}
	}
	return nil
}

// unmarshal decodes every resource as a RateLimitConfig and sorts them by
// name.
func unmarshal(resources []*anypb.Any) ([]*rlsconf.RateLimitConfig, error) {
	out := make([]*rlsconf.RateLimitConfig, len(resources))
	for i, r := range resources {
		c := &rlsconf.RateLimitConfig{}
		if err := anypb.UnmarshalTo(r, c, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("resource %d (%s) is not a RateLimitConfig: %w", i, r.GetTypeUrl(), err)
		}
		out[i] = c
	}
	slices.SortStableFunc(out, func(a, b *rlsconf.RateLimitConfig) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// resourceName names the i-th resource (in name order) for errors.
func resourceName(c *rlsconf.RateLimitConfig, i int) string {
	if c.GetName() == "" {
		return fmt.Sprintf("RateLimitConfig #%d (no name)", i)
	}
	return fmt.Sprintf("RateLimitConfig %q", c.GetName())
}

// withoutLines returns err with every *descriptors.ConfigError's line
// dropped (a line of the YAML made from a resource means nothing to the
// control plane), one problem per line, as descriptors.Load joins them.
func withoutLines(err error) error {
	var leaves []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if ce, ok := e.(*descriptors.ConfigError); ok {
			c := *ce
			c.Line = 0
			e = &c
		}
		leaves = append(leaves, e)
	}
	walk(err)
	return errors.Join(leaves...)
}

// The descriptor YAML of a RateLimitConfig, with the keys of the
// reference service's configuration format. It is written as JSON, which
// is YAML whose strings are all quoted: a value such as "yes" or "500" stays
// a string.
type (
	yamlFile struct {
		Domain      string           `json:"domain"`
		Descriptors []yamlDescriptor `json:"descriptors,omitempty"`
	}
	yamlDescriptor struct {
		Key            string           `json:"key"`
		Value          string           `json:"value,omitempty"`
		RateLimit      *yamlRateLimit   `json:"rate_limit,omitempty"`
		Descriptors    []yamlDescriptor `json:"descriptors,omitempty"`
		ShadowMode     bool             `json:"shadow_mode,omitempty"`
		DetailedMetric bool             `json:"detailed_metric,omitempty"`
		QuotaMode      bool             `json:"quota_mode,omitempty"`
		Metadata       map[string]any   `json:"metadata,omitempty"`
	}
	yamlRateLimit struct {
		Unit            string        `json:"unit,omitempty"`
		RequestsPerUnit uint32        `json:"requests_per_unit"`
		Unlimited       bool          `json:"unlimited,omitempty"`
		Name            string        `json:"name,omitempty"`
		Replaces        []yamlReplace `json:"replaces,omitempty"`
		Reserve         *yamlReserve  `json:"reserve,omitempty"` // from the overlay (reservations.go)
	}
	yamlReserve struct {
		Hits   int64  `json:"hits"`
		TTL    string `json:"ttl"`
		Handle string `json:"handle"`
	}
	yamlReplace struct {
		Name string `json:"name"`
	}
)

// YAML returns the descriptor file a RateLimitConfig stands for: its
// domain and descriptors, each with key, value, rate_limit (unit,
// requests_per_unit, unlimited, name, replaces), nested descriptors,
// shadow_mode, detailed_metric, quota_mode and metadata, as the reference
// service reads them. The proto has no value_to_metric or share_threshold.
//
// A unit is written by its enum name, so an unknown one fails as in a file
// ("invalid rate limit unit 'UNKNOWN'"); but an unlimited limit's UNKNOWN
// (the proto's zero, what a control plane sends when it sets no unit) is
// left out, as the reference accepts it.
func YAML(c *rlsconf.RateLimitConfig) ([]byte, error) {
	return encodeYAML(yamlFileOf(c))
}

// yamlFileOf is the descriptor file of c, before it is written.
func yamlFileOf(c *rlsconf.RateLimitConfig) yamlFile {
	return yamlFile{Domain: c.GetDomain(), Descriptors: yamlDescriptors(c.GetDescriptors())}
}

// encodeYAML writes f.
func encodeYAML(f yamlFile) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("write descriptor YAML: %w", err)
	}
	return b.Bytes(), nil
}

func yamlDescriptors(ds []*rlsconf.RateLimitDescriptor) []yamlDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		out[i] = yamlDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      yamlLimit(d.GetRateLimit()),
			Descriptors:    yamlDescriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
		}
		if m := d.GetMetadata(); m != nil {
			out[i].Metadata = m.AsMap()
		}
	}
	return out
}

func yamlLimit(p *rlsconf.RateLimitPolicy) *yamlRateLimit {
	if p == nil {
		return nil
	}
	l := &yamlRateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
	if u := p.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN || !l.Unlimited {
		l.Unit = unitName(u)
	}
	for _, r := range p.GetReplaces() {
		l.Replaces = append(l.Replaces, yamlReplace{Name: r.GetName()})
	}
	return l
}

// unitName is u's enum name, or its number for a value the proto does not
// know (a newer control plane's), which then fails as an unknown unit.
func unitName(u rlsconf.RateLimitUnit) string {
	if name, ok := rlsconf.RateLimitUnit_name[int32(u)]; ok {
		return name
	}
	return strconv.Itoa(int(u))
}
