package xdsconfig

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
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
// in errors), made into descriptors' model of one (fileOf) and built by
// descriptors.Build, which checks it as a YAML file, so MERGE_DOMAIN_CONFIG
// (opts) applies across resources as across files. The resources are taken
// in name order (a control plane's cache sends them in any order). The
// error names each resource and the place in it of every problem, without
// file lines, which a resource has none of.
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
	files := make([]*descriptors.File, len(cfgs))
	for i, c := range cfgs {
		name := resourceName(c, i)
		if err := checkSizes(c); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[i] = fileOf(name, c)
		for _, note := range res.apply(files[i]) {
			if log != nil {
				log.Warn("reservation overlay entry left out of an xDS configuration (RESERVATION_OVERLAY)", "resource", name, "why", note)
			}
		}
	}
	return descriptors.Build(opts, files...)
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

// fileOf is the descriptor file, named name, that c stands for: its domain
// and descriptors, each with key, value, rate_limit (unit, requests_per_unit,
// unlimited, name, replaces), nested descriptors, shadow_mode,
// detailed_metric, quota_mode and metadata, as the reference service reads
// them. The proto has no value_to_metric or share_threshold.
func fileOf(name string, c *rlsconf.RateLimitConfig) *descriptors.File {
	return &descriptors.File{Name: name, Domain: c.GetDomain(), Descriptors: descriptorsOf(c.GetDescriptors())}
}

func descriptorsOf(ds []*rlsconf.RateLimitDescriptor) []descriptors.Descriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]descriptors.Descriptor, len(ds))
	for i, d := range ds {
		out[i] = descriptors.Descriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      limitOfPolicy(d.GetRateLimit()),
			Descriptors:    descriptorsOf(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
		}
		if m := d.GetMetadata(); m != nil {
			out[i].Metadata, _ = metadataValue(m.AsMap()).(map[string]any)
		}
	}
	return out
}

// limitOfPolicy is the rate_limit of p. Its unit is the enum's name, so an
// unknown one fails as in a file ("invalid rate limit unit 'UNKNOWN'");
// but an unlimited limit's UNKNOWN (the proto's zero, what a control plane
// sends when it sets no unit) is left out, as the reference accepts it.
func limitOfPolicy(p *rlsconf.RateLimitPolicy) *descriptors.Limit {
	if p == nil {
		return nil
	}
	l := &descriptors.Limit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
	if u := p.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN || !l.Unlimited {
		l.Unit = unitName(u)
	}
	for _, r := range p.GetReplaces() {
		l.Replaces = append(l.Replaces, r.GetName())
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

// metadataValue is v, a value of a protobuf Struct, with its whole numbers
// as int, as a file's metadata has them (a Struct's numbers are all
// float64).
func metadataValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = metadataValue(e)
		}
	case []any:
		for i, e := range v {
			v[i] = metadataValue(e)
		}
	case float64:
		if v == math.Trunc(v) && v >= math.MinInt && v < math.MaxInt {
			return int(v)
		}
	}
	return v
}
