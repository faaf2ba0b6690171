package ratelimitsvc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is the response's dynamic_metadata with
// RESPONSE_DYNAMIC_METADATA, field for field as the reference service
// builds it (ratelimitToMetadata in its src/service/ratelimit.go); Envoy
// stores it under the filter's namespace, envoy.filters.http.ratelimit:
//
//	domain       the request's domain
//	descriptors  per request descriptor, in order: entries ["key=value", …];
//	             limit, the descriptor's limit override as protobuf text
//	             ("requests_per_unit:10 unit:DAY"), when it has one;
//	             hitsAddend, when the descriptor sets it
//	hitsAddend   the request's hits_addend, when not 0
//	metadata     the YAML metadata of every descriptor that passed (a limit
//	             applied and its status is not OVER_LIMIT; shadow mode passes),
//	             merged in descriptor order: the first value of a key wins,
//	             and two maps under one key merge the same way; absent when
//	             no passed descriptor has metadata
//	degraded     true when the failure policy (FAILURE_MODE) decided a limit
//	             of any descriptor, the backend being down; absent otherwise
//	             (Throttle's, not the reference's)
//
// The error names metadata that cannot be converted; the rest is returned.
func dynamicMetadata(req *rlsv3.RateLimitRequest, statuses []*rlsv3.RateLimitResponse_DescriptorStatus, prepared []*limited) (*structpb.Struct, error) {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if degraded(prepared) {
		fields["degraded"] = structpb.NewBoolValue(true)
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	var errs []error
	for i, l := range prepared {
		if l == nil || l.unlimited() || l.metadata == nil || statuses[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		md, err := structpb.NewStruct(l.metadata)
		if err != nil {
			errs = append(errs, fmt.Errorf("descriptor %d (%s): %w", i, l.statsKey, err))
			continue
		}
		mergeStruct(passed, md)
	}
	if len(passed.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}, errors.Join(errs...)
}

func descriptorStruct(d *rlcommon.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if o := d.GetLimit(); o != nil {
		fields["limit"] = structpb.NewStringValue(overrideText(o))
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// overrideText is a limit override in protobuf text format, as the
// reference's Limit.String(), without the random spacing Go's protobuf
// text output adds so that it is not parsed: fields in order, zero values
// left out.
func overrideText(o *rlcommon.RateLimitDescriptor_RateLimitOverride) string {
	var parts []string
	if n := o.GetRequestsPerUnit(); n != 0 {
		parts = append(parts, "requests_per_unit:"+strconv.FormatUint(uint64(n), 10))
	}
	if u := o.GetUnit(); u != 0 {
		parts = append(parts, "unit:"+u.String())
	}
	if m := o.GetUnitMultiplier(); m != nil {
		v := ""
		if m.GetValue() != 0 {
			v = "value:" + strconv.FormatUint(uint64(m.GetValue()), 10)
		}
		parts = append(parts, "unit_multiplier:{"+v+"}")
	}
	return strings.Join(parts, " ")
}

// mergeStruct adds src's fields to dst: a key dst lacks is added, two
// structs under one key are merged the same way, and otherwise dst's value
// stays (the reference's mergeMetadata).
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if hs, vs := have.GetStructValue(), v.GetStructValue(); hs != nil && vs != nil {
			mergeStruct(hs, vs)
		}
	}
}
