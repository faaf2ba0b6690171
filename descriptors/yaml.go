package descriptors

// Reading YAML as the reference service reads it. It decodes with yaml.v2;
// Throttle parses once with go.yaml.in/yaml/v4, whose nodes carry lines
// and whose syntax errors carry the line of the problem (yaml.v3's named
// the start of the enclosing block, counted from 0), and takes values the
// v2 way: YAML 1.1 booleans (yes, on, n, …), a string field gets
// the scalar as written (`value: 500` is "500"), and a value decoded into
// `any` is map[any]any, []any, string, int, int64, uint64, float64, bool or
// nil, timestamps kept as strings, merge keys (<<) merged.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v4"
)

// document parses data and returns the root node of its first document, or
// nil when it has none. It also refuses what yaml.v2 refuses only when it
// decodes (an alias inside its own anchor, excessive aliasing, a mapping or
// sequence as a key, a merge of anything but mappings, a value that does not
// fit its explicit tag), so every node below the root decodes without error.
//
// Its errors are *yamlError values, with the line of the problem when one
// is known.
func document(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	d := decoder{limit: true}
	if _, err := d.value(root); err != nil {
		return nil, err
	}
	return root, nil
}

// deref returns the node an alias stands for, or n itself.
func deref(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.AliasNode {
		return n.Alias
	}
	return n
}

// isNull reports whether n is absent or null (~, null, or nothing).
func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// text returns what yaml.v2 puts in a string field for the scalar n: the
// scalar as written, !!binary decoded.
func text(n *yaml.Node) string {
	n = deref(n)
	if n.ShortTag() == "!!binary" {
		var s string
		_ = n.Decode(&s) // document has decoded it once
		return s
	}
	return n.Value
}

// display returns n decoded, for a message or the metadata map. document
// has decoded every node once, so this cannot fail.
func display(n *yaml.Node) any {
	var d decoder
	v, _ := d.value(n)
	return v
}

// yaml11Bools are the YAML 1.1 booleans yaml.v2 knows and yaml.v4 reads as
// strings.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// scalar resolves the scalar n as yaml.v2 does.
func scalar(n *yaml.Node) (any, error) {
	if b, ok := yaml11Bools[n.Value]; ok && (n.Style == 0 || n.Tag == "!!bool") {
		return b, nil
	}
	if n.ShortTag() == "!!str" {
		return n.Value, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		msg := err.Error()
		if le := (*yaml.LoadError)(nil); errors.As(err, &le) {
			msg = le.Message // without its position, which is unknown
		}
		return nil, yamlErrorf(n, "%s", msg)
	}
	if _, ok := v.(time.Time); ok {
		return n.Value, nil // yaml.v2 keeps a timestamp as written
	}
	return v, nil
}

// decoder decodes nodes into `any` as yaml.v2 does.
type decoder struct {
	// limit refuses excessive aliasing, as yaml.v2 does: document's first
	// decoding sets it, so no later one can expand more.
	limit bool
	// nodes counts values decoded, aliased those of them under an alias,
	// depth the aliases being followed.
	nodes, aliased, depth int
	following             map[*yaml.Node]bool
}

func (d *decoder) value(n *yaml.Node) (any, error) {
	d.nodes++
	if d.depth > 0 {
		d.aliased++
	}
	if d.limit && d.aliased > 100 && d.nodes > 1000 && float64(d.aliased)/float64(d.nodes) > allowedAliasRatio(d.nodes) {
		return nil, &yamlError{msg: "document contains excessive aliasing"} // of the whole document
	}
	switch n.Kind {
	case yaml.AliasNode:
		var v any
		err := d.follow(n, func(target *yaml.Node) (err error) {
			v, err = d.value(target)
			return err
		})
		return v, err
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, e := range n.Content {
			v, err := d.value(e)
			if err != nil {
				return nil, err
			}
			s[i] = v
		}
		return s, nil
	case yaml.MappingNode:
		m := map[any]any{}
		err := d.pairs(n, func(k, v *yaml.Node) error {
			key, err := d.value(k)
			if err != nil {
				return err
			}
			switch key.(type) {
			case map[any]any, []any:
				return yamlErrorf(k, "invalid map key: %#v", key)
			}
			val, err := d.value(v)
			m[key] = val
			return err
		})
		return m, err
	}
	return scalar(n)
}

// follow calls f with the node the alias n stands for, refusing an alias
// inside its own anchor.
func (d *decoder) follow(n *yaml.Node, f func(*yaml.Node) error) error {
	if d.following[n] {
		return yamlErrorf(n, "anchor '%s' value contains itself", n.Value)
	}
	if d.following == nil {
		d.following = map[*yaml.Node]bool{}
	}
	d.following[n] = true
	d.depth++
	err := f(n.Alias)
	d.depth--
	delete(d.following, n)
	return err
}

// pairs calls f with each key and value of the mapping n in the order
// yaml.v2 assigns them: a merge key assigns the pairs of its mappings in its
// place (of a sequence of mappings, the last first), so that, as there, the
// last assignment of a key is its value.
func (d *decoder) pairs(n *yaml.Node, f func(k, v *yaml.Node) error) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		if isMerge(k) {
			err = d.merge(v, f)
		} else {
			err = f(k, v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) merge(v *yaml.Node, f func(k, v *yaml.Node) error) error {
	one := func(m *yaml.Node) error {
		if deref(m).Kind != yaml.MappingNode {
			return yamlErrorf(m, "map merge requires map or sequence of maps as the value")
		}
		if m.Kind == yaml.AliasNode {
			return d.follow(m, func(target *yaml.Node) error { return d.pairs(target, f) })
		}
		return d.pairs(m, f)
	}
	if v.Kind != yaml.SequenceNode {
		return one(v)
	}
	for i := len(v.Content) - 1; i >= 0; i-- {
		if err := one(v.Content[i]); err != nil {
			return err
		}
	}
	return nil
}

// isMerge reports whether the mapping key k is the merge key <<.
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge"
}

// allowedAliasRatio is yaml.v2's: the share of decoded values that may come
// from aliases, 99% up to 400,000 values, down to 10% at 4,000,000.
func allowedAliasRatio(nodes int) float64 {
	const low, high = 400_000, 4_000_000
	switch {
	case nodes <= low:
		return 0.99
	case nodes >= high:
		return 0.10
	}
	return 0.99 - 0.89*float64(nodes-low)/float64(high-low)
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
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = jsonValue(e)
		}
		return s
	}
	return v
}

// yamlError is a problem of a file's YAML itself, not of what it says.
type yamlError struct {
	line int // where the problem is; 0 when unknown
	msg  string
}

func (e *yamlError) Error() string { return "yaml: " + e.msg }

// yamlErrorf returns a yamlError at the line of n.
func yamlErrorf(n *yaml.Node, format string, args ...any) error {
	return &yamlError{line: n.Line, msg: fmt.Sprintf(format, args...)}
}

// openers are the parser's contexts that something opened and must close
// on a later line: the name a message gives each.
var openers = map[string]string{
	"while parsing a flow mapping":   "the flow mapping '{'",
	"while parsing a flow sequence":  "the flow sequence '['",
	"while scanning a quoted scalar": "the quoted string",
}

// syntaxError turns an error of yaml.Unmarshal into a yamlError at the line
// of the actual problem. The parser notes where it noticed the problem and
// the construct it was in. That place is the problem, but for a '{', '['
// or quote left open, which it notices on a later line, often the next
// descriptor's: the line is then the opener's, and the message names both.
func syntaxError(err error) error {
	var le *yaml.LoadError
	if !errors.As(err, &le) || le.Mark.Line == 0 {
		return &yamlError{msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	at, ctx := le.Mark, le.ContextMark
	if name, ok := openers[le.ContextMsg]; ok && ctx.Line > 0 && ctx.Line < at.Line {
		return &yamlError{line: ctx.Line, msg: fmt.Sprintf("%s opened at line %d, column %d is not closed: %s at line %d, column %d",
			name, ctx.Line, ctx.Column, le.Message, at.Line, at.Column)}
	}
	msg := fmt.Sprintf("%s at line %d, column %d", le.Message, at.Line, at.Column)
	if le.ContextMsg != "" && ctx.Line > 0 {
		msg += fmt.Sprintf(" (%s that starts at line %d, column %d)", le.ContextMsg, ctx.Line, ctx.Column)
	}
	return &yamlError{line: at.Line, msg: msg}
}
