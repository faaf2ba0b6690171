package descriptors

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v2"

	"github.com/throttle-rl/throttle/algorithms"
)

// File is one descriptor YAML file, as read and checked by Parse.
type File struct {
	// Name is where the file came from; errors name it.
	Name string
	// Domain is required.
	Domain string
	// Descriptors are the top-level descriptors, in file order.
	Descriptors []Descriptor
}

// Descriptor is one descriptor of a File, with upstream's fields.
type Descriptor struct {
	Key   string // required
	Value string // optional; '*' makes it a wildcard
	// RateLimit is the limit, or nil: no limit at this level.
	RateLimit      *RateLimit
	Descriptors    []Descriptor
	ShadowMode     bool
	DetailedMetric bool
	ShareThreshold bool
	ValueToMetric  bool
	QuotaMode      bool
	// Metadata is free-form; values are JSON-compatible (map[string]any,
	// []any, string, int, float64, bool, nil).
	Metadata map[string]any
}

func (d Descriptor) spec() nodeSpec {
	return nodeSpec{
		key:            d.Key,
		value:          d.Value,
		limit:          d.RateLimit,
		shadowMode:     d.ShadowMode,
		detailedMetric: d.DetailedMetric,
		shareThreshold: d.ShareThreshold,
		valueToMetric:  d.ValueToMetric,
		quotaMode:      d.QuotaMode,
		metadata:       d.Metadata,
	}
}

// yamlNode is a YAML value with what the checks need: the resolved value
// (for upstream's %v messages and types), the text a string field would get
// (upstream decodes `value: 500` or `value: on` into a string field as
// "500" and "on"), and, for mappings, the keys in document order.
type yamlNode struct {
	raw  any
	text string
	keys []any             // mapping: keys in order (duplicates kept)
	vals map[any]*yamlNode // mapping: values; nil pointer = null
	seq  []*yamlNode       // sequence
	kind int               // kindNull, kindScalar, kindMap, kindSeq
}

const (
	kindNull = iota
	kindScalar
	kindMap
	kindSeq
)

// UnmarshalYAML implements yaml.Unmarshaler.
func (n *yamlNode) UnmarshalYAML(unmarshal func(any) error) error {
	if err := unmarshal(&n.raw); err != nil {
		return err
	}
	switch n.raw.(type) {
	case nil:
		n.kind = kindNull
	case map[any]any, yaml.MapSlice:
		n.kind = kindMap
		var ms yaml.MapSlice
		if err := unmarshal(&ms); err != nil {
			return err
		}
		for _, it := range ms {
			n.keys = append(n.keys, it.Key)
		}
		if err := unmarshal(&n.vals); err != nil {
			return err
		}
	case []any:
		n.kind = kindSeq
		if err := unmarshal(&n.seq); err != nil {
			return err
		}
	default:
		n.kind = kindScalar
		if err := unmarshal(&n.text); err != nil {
			n.text = fmt.Sprint(n.raw)
		}
	}
	return nil
}

// parser collects the problems of one file.
type parser struct {
	file string
	errs []error
}

func (p *parser) fail(path []string, format string, args ...any) {
	p.errs = append(p.errs, &ConfigError{File: p.file, Path: strings.Join(path, " › "), Msg: fmt.Sprintf(format, args...)})
}

// fields checks the keys of a mapping: each a string, known, and not
// repeated. It returns the values by key (a nil *yamlNode is null).
func (p *parser) fields(n *yamlNode, path []string, known ...string) (map[string]*yamlNode, bool) {
	out := map[string]*yamlNode{}
	ok := true
	for _, k := range n.keys {
		ks, isString := k.(string)
		if !isString {
			p.fail(path, "config error, key is not of type string: %v", k)
			ok = false
			continue
		}
		if !contains(known, ks) {
			p.fail(path, "config error, unknown key '%s'", ks)
			ok = false
			continue
		}
		if _, dup := out[ks]; dup {
			p.fail(path, "config error, key '%s' appears twice", ks)
			ok = false
			continue
		}
		out[ks] = n.vals[k]
	}
	return out, ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) str(n *yamlNode, path []string, field string) string {
	switch {
	case n == nil || n.kind == kindNull:
		return ""
	case n.kind == kindScalar:
		return n.text
	}
	p.fail(path, "%s must be a string, not %v", field, n.raw)
	return ""
}

func (p *parser) boolean(n *yamlNode, path []string, field string) bool {
	if n == nil || n.kind == kindNull {
		return false
	}
	if b, ok := n.raw.(bool); ok {
		return b
	}
	p.fail(path, "%s must be true or false, not %v", field, n.raw)
	return false
}

// list returns the elements of a sequence of mappings, refusing other
// elements with upstream's message.
func (p *parser) list(n *yamlNode, path []string, field string) []*yamlNode {
	if n == nil || n.kind == kindNull {
		return nil
	}
	if n.kind != kindSeq {
		p.fail(path, "%s must be a list, not %v", field, n.raw)
		return nil
	}
	var out []*yamlNode
	for i, e := range n.seq {
		if e == nil || e.kind != kindMap {
			var v any
			if e != nil {
				v = e.raw
			}
			p.fail(append(path, fmt.Sprintf("%s[%d]", field, i)), "config error, yaml file contains list of type other than map: %v", v)
			out = append(out, nil)
			continue
		}
		out = append(out, e)
	}
	return out
}

// Parse reads one descriptor YAML file strictly and checks everything that
// does not depend on other files. name is used in errors. The errors are
// *ConfigError values (joined with errors.Join when there are several).
func Parse(name string, data []byte) (*File, error) {
	p := &parser{file: name}
	f := p.parse(data)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return f, nil
}

func (p *parser) parse(data []byte) *File {
	var root yamlNode
	if err := yaml.Unmarshal(data, &root); err != nil {
		p.fail(nil, "error loading config file: %s", err)
		return nil
	}
	f := &File{Name: p.file}
	if root.kind == kindNull {
		p.fail(nil, "config file cannot have empty domain")
		return f
	}
	if root.kind != kindMap {
		p.fail(nil, "error loading config file: the file must be a map with domain and descriptors, not %v", root.raw)
		return f
	}
	top, ok := p.fields(&root, nil, "domain", "descriptors")
	if !ok {
		return f
	}
	f.Domain = p.str(top["domain"], nil, "domain")
	if f.Domain == "" {
		p.fail(nil, "config file cannot have empty domain")
		return f
	}
	path := []string{"domain " + strconv.Quote(f.Domain)}
	f.Descriptors = p.descriptors(top["descriptors"], path)
	return f
}

func (p *parser) descriptors(n *yamlNode, path []string) []Descriptor {
	var out []Descriptor
	for i, e := range p.list(n, path, "descriptors") {
		if e == nil {
			continue
		}
		out = append(out, p.descriptor(e, append(path[:len(path):len(path)], fmt.Sprintf("descriptors[%d]", i))))
	}
	return out
}

func (p *parser) descriptor(n *yamlNode, path []string) Descriptor {
	fs, _ := p.fields(n, path, "key", "value", "rate_limit", "descriptors", "shadow_mode",
		"detailed_metric", "share_threshold", "value_to_metric", "metadata", "quota_mode")
	d := Descriptor{
		Key:            p.str(fs["key"], path, "key"),
		Value:          p.str(fs["value"], path, "value"),
		ShadowMode:     p.boolean(fs["shadow_mode"], path, "shadow_mode"),
		DetailedMetric: p.boolean(fs["detailed_metric"], path, "detailed_metric"),
		ShareThreshold: p.boolean(fs["share_threshold"], path, "share_threshold"),
		ValueToMetric:  p.boolean(fs["value_to_metric"], path, "value_to_metric"),
		QuotaMode:      p.boolean(fs["quota_mode"], path, "quota_mode"),
	}
	if m := fs["metadata"]; m != nil && m.kind != kindNull {
		if m.kind != kindMap {
			p.fail(path, "metadata must be a map, not %v", m.raw)
		} else {
			d.Metadata, _ = jsonValue(m.raw).(map[string]any)
		}
	}
	if rl := fs["rate_limit"]; rl != nil && rl.kind != kindNull {
		d.RateLimit = p.rateLimit(rl, append(path[:len(path):len(path)], "rate_limit"))
	}
	if err := d.spec().checkShape(); err != nil {
		p.fail(path, "%s", err)
	}
	d.Descriptors = p.descriptors(fs["descriptors"], path)
	return d
}

func (p *parser) rateLimit(n *yamlNode, path []string) *RateLimit {
	if n.kind != kindMap {
		p.fail(path, "rate_limit must be a map, not %v", n.raw)
		return nil
	}
	fs, ok := p.fields(n, path, "unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "refill_rate")
	l := &RateLimit{
		Unlimited: p.boolean(fs["unlimited"], path, "unlimited"),
		Name:      p.str(fs["name"], path, "name"),
	}
	unit := p.str(fs["unit"], path, "unit")
	var err error
	if unit != "" {
		l.Unit, err = ParseUnit(unit)
	}
	if err == nil {
		err = l.checkUnit(unit)
	}
	if err != nil {
		p.fail(path, "%s", err)
		ok = false
	}
	if rpu := fs["requests_per_unit"]; rpu != nil && rpu.kind != kindNull {
		v, good := wholeNumber(rpu.raw)
		if !good || v < 0 || v > math.MaxUint32 {
			p.fail(path, "requests_per_unit must be a whole number between 0 and %d, not %v", uint32(math.MaxUint32), rpu.raw)
			ok = false
		}
		l.RequestsPerUnit = uint32(v)
	}
	for i, r := range p.list(fs["replaces"], path, "replaces") {
		if r == nil {
			ok = false
			continue
		}
		rpath := append(path[:len(path):len(path)], fmt.Sprintf("replaces[%d]", i))
		rf, good := p.fields(r, rpath, "name")
		ok = ok && good
		l.Replaces = append(l.Replaces, p.str(rf["name"], rpath, "name"))
	}
	if a := p.str(fs["algorithm"], path, "algorithm"); a != "" {
		l.Algorithm = algorithms.Algorithm(a)
	}
	if rr := fs["refill_rate"]; rr != nil && rr.kind != kindNull {
		switch v := rr.raw.(type) {
		case int:
			l.RefillRate = float64(v)
		case int64:
			l.RefillRate = float64(v)
		case uint64:
			l.RefillRate = float64(v)
		case float64:
			l.RefillRate = v
		default:
			p.fail(path, "refill_rate must be a number of tokens per second, not %v", rr.raw)
			ok = false
		}
	}
	if ok {
		if err := l.checkSettings(); err != nil {
			p.fail(path, "%s", err)
		}
	}
	return l
}

// wholeNumber returns v as an integer when it is one (YAML ints, and floats
// without a fraction, as upstream's decoder accepts them).
func wholeNumber(v any) (int64, bool) {
	switch v := v.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case uint64:
		if v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	case float64:
		if v != math.Trunc(v) || v < math.MinInt64 || v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	}
	return 0, false
}

// jsonValue turns a decoded YAML value into JSON-compatible values: maps
// with string keys (other keys formatted with %v), []any, and scalars.
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonValue(e)
		}
		return m
	case yaml.MapSlice:
		m := make(map[string]any, len(v))
		for _, it := range v {
			m[fmt.Sprint(it.Key)] = jsonValue(it.Value)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = jsonValue(e)
		}
		return s
	}
	return v
}
