package descriptors

import (
	"errors"
	"fmt"
	"slices"

	yaml "go.yaml.in/yaml/v4"
)

// Parse reads one descriptor YAML file strictly into a File and checks
// everything that does not depend on other files, as Load does. name is
// used in errors. The errors are *ConfigError values (joined with
// errors.Join when there are several), each with the line of the problem
// when the file is YAML at all.
func Parse(name string, data []byte) (*File, error) {
	f, err := parse(name, data, Options{GlobalScope: true}) // no server to lack a global Redis
	if err != nil {
		return nil, err
	}
	return f, nil
}

// parse is Parse with opts, but returns the File even with errors (see
// readYAML).
func parse(name string, data []byte, opts Options) (*File, error) {
	_, files, err := load(opts, []Source{{Name: name, Data: data}})
	return files[0], err
}

// readYAML reads the descriptor YAML data, named name, into a File, and
// refuses what only YAML can get wrong: syntax, unknown or repeated keys,
// a field of the wrong type, a number out of range. Build checks the rest.
// With problems, the File's Domain is still the domain the file names, if
// it names one as a scalar, so that a Reloader can tell whose problems
// they are, and its descriptors are those it could read, so that Build can
// look for problems in them too; gaps says what it could not read.
func readYAML(name string, data []byte) (*File, []*ConfigError, gaps) {
	p := &parser{file: name, gaps: gaps{}}
	f := &File{Name: name}
	p.parse(f, data)
	return f, p.errs, p.gaps
}

// parser collects the problems of one file and the gaps they leave.
type parser struct {
	file string
	errs []*ConfigError
	gaps gaps
}

func (p *parser) fail(at place, format string, args ...any) {
	p.errs = append(p.errs, at.problem(p.file, fmt.Sprintf(format, args...)))
}

func (p *parser) parse(f *File, data []byte) {
	root, err := document(data)
	if err != nil {
		at := place{}
		if ye := (*yamlError)(nil); errors.As(err, &ye) {
			at.line = ye.line // the problem's, when known
		}
		p.fail(at, "error loading config file: %s", err)
		p.gaps[""] = gapAll
		return
	}
	if root != nil {
		f.Line = root.Line
	}
	at := place{line: f.Line}
	var top mapping
	if !isNull(root) {
		if root.Kind != yaml.MappingNode {
			p.fail(at, "error loading config file: the file must be a map with domain and descriptors, not %v", display(root))
			p.gaps[""] = gapAll
			return
		}
		var ok bool
		if top, ok = p.fields(root, at, "domain", "descriptors"); !ok {
			if d := top["domain"].value; !isNull(d) && deref(d).Kind == yaml.ScalarNode {
				f.Domain = text(d) // for the Reloader only: Parse returns no File
			}
			p.gaps[""] = gapAll
			return
		}
		f.Domain = p.str(top["domain"].value, at, "domain")
	}
	if f.Domain != "" { // else Build says it cannot be empty
		f.Descriptors = p.descriptors(top["descriptors"].value, domainPlace(f.Domain, f.Line))
	}
}

// field is a key of a mapping and its value; both nil when the key is
// absent.
type field struct{ key, value *yaml.Node }

// mapping is the keys of a mapping, by name.
type mapping map[string]field

// fields checks the keys of the mapping n as the reference service does:
// each a string, known, and not repeated; a merge key (<<) is passed over.
// A key's value is the last yaml.v2 assigns it, merges included.
func (p *parser) fields(n *yaml.Node, at place, known ...string) (mapping, bool) {
	n = deref(n)
	last := map[string]*yaml.Node{}
	var d decoder
	_ = d.pairs(n, func(k, v *yaml.Node) error { // document has decoded them once
		if name, ok := display(k).(string); ok {
			last[name] = v
		}
		return nil
	})
	out := mapping{}
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if isMerge(k) {
			continue
		}
		name, isString := display(k).(string)
		switch {
		case !isString:
			p.fail(at, "config error, key is not of type string: %v", display(k))
		case !slices.Contains(known, name):
			p.fail(at, "config error, unknown key '%s'", name)
		case out[name].key != nil:
			p.fail(at, "config error, key '%s' appears twice", name)
		default:
			out[name] = field{key: k, value: last[name]}
			continue
		}
		ok = false
	}
	return out, ok
}

func (p *parser) str(n *yaml.Node, at place, name string) string {
	switch {
	case isNull(n):
		return ""
	case deref(n).Kind == yaml.ScalarNode:
		return text(n)
	}
	p.fail(at, "%s must be a string, not %v", name, display(n))
	return ""
}

func (p *parser) boolean(n *yaml.Node, at place, name string) bool {
	if isNull(n) {
		return false
	}
	v := display(n)
	if b, ok := v.(bool); ok {
		return b
	}
	p.fail(at, "%s must be true or false, not %v", name, v)
	return false
}

// list returns the elements of a sequence of mappings, with nil (and
// upstream's message) in place of any other element.
func (p *parser) list(n *yaml.Node, at place, name string) []*yaml.Node {
	if isNull(n) {
		return nil
	}
	if deref(n).Kind != yaml.SequenceNode {
		p.fail(at, "%s must be a list, not %v", name, display(n))
		return nil
	}
	out := slices.Clone(deref(n).Content)
	for i, e := range out {
		if deref(e).Kind != yaml.MappingNode {
			p.fail(at.in(fmt.Sprintf("%s[%d]", name, i), e.Line), "config error, yaml file contains list of type other than map: %v", display(e))
			out[i] = nil
		}
	}
	return out
}

// each calls f with every element of elems, the list name at at, and its
// place; an element p.list found no map (nil) is a gap, kept in place so
// that the indexes are the file's.
func (p *parser) each(elems []*yaml.Node, at place, name string, f func(i int, e *yaml.Node, eat place)) {
	for i, e := range elems {
		eat := at.in(fmt.Sprintf("%s[%d]", name, i), 0)
		if e == nil {
			p.gaps[eat.String()] = gapAll
			continue
		}
		eat.line = e.Line
		f(i, e, eat)
	}
}

func (p *parser) descriptors(n *yaml.Node, at place) []Descriptor {
	elems := p.list(n, at, "descriptors")
	if len(elems) == 0 {
		return nil
	}
	out := make([]Descriptor, len(elems))
	p.each(elems, at, "descriptors", func(i int, e *yaml.Node, dat place) { out[i] = p.descriptor(e, dat) })
	return out
}

func (p *parser) descriptor(n *yaml.Node, at place) Descriptor {
	fs, _ := p.fields(n, at, "key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"detailed_metric", "share_threshold", "value_to_metric", "metadata", "quota_mode")
	before := len(p.errs)
	d := Descriptor{Key: p.str(fs["key"].value, at, "key"), Value: p.str(fs["value"].value, at, "value"), Line: at.line}
	if len(p.errs) > before {
		p.gaps[at.String()] = gapFields
	}
	d.ShadowMode = p.boolean(fs["shadow_mode"].value, at, "shadow_mode")
	d.DetailedMetric = p.boolean(fs["detailed_metric"].value, at, "detailed_metric")
	d.ShareThreshold = p.boolean(fs["share_threshold"].value, at, "share_threshold")
	d.ValueToMetric = p.boolean(fs["value_to_metric"].value, at, "value_to_metric")
	d.QuotaMode = p.boolean(fs["quota_mode"].value, at, "quota_mode")
	if m := fs["metadata"].value; !isNull(m) {
		if deref(m).Kind != yaml.MappingNode {
			p.fail(at, "metadata must be a map, not %v", display(m))
		} else {
			d.Metadata, _ = jsonValue(display(m)).(map[string]any)
		}
	}
	if rl := fs["rate_limit"]; !isNull(rl.value) {
		d.RateLimit = p.rateLimit(rl.value, at.in("rate_limit", rl.key.Line))
	}
	switch rls := fs["rate_limits"]; {
	case !isNull(rls.value):
		d.RateLimits = p.rateLimits(rls.value, at, rls.key.Line)
	case rls.key != nil:
		p.fail(at.in("rate_limits", rls.key.Line), "rate_limits must list at least one limit")
	}
	d.Descriptors = p.descriptors(fs["descriptors"].value, at)
	return d
}
