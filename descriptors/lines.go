package descriptors

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// segment is one step of a ConfigError.Path: a mapping key, then
// optionally an index into the sequence under it.
var segment = regexp.MustCompile(`^([A-Za-z_]+)(?:\[(\d+)\])?$`)

// lineOf returns the line in data of the node that path (a ConfigError.Path
// such as `domain "edge" › descriptors[2] › rate_limit`) names, or of the
// deepest node it can find on the way; 0 when the file cannot be read as
// YAML at all.
func lineOf(data []byte, path string) int {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := n.Line
	for _, seg := range strings.Split(path, " › ") {
		if strings.HasPrefix(seg, "domain ") {
			continue // the root mapping
		}
		m := segment.FindStringSubmatch(seg)
		if m == nil || n.Kind != yamlv3.MappingNode {
			return line
		}
		var next *yamlv3.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == m[1] {
				line, next = n.Content[i].Line, n.Content[i+1]
				break
			}
		}
		if next == nil {
			return line
		}
		n = next
		if m[2] != "" {
			idx, _ := strconv.Atoi(m[2])
			if n.Kind != yamlv3.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line
}

// addLines sets the Line of every *ConfigError in err whose file is in
// srcs, so that `throttle config check` can say file:line.
func addLines(err error, srcs []Source) {
	data := map[string][]byte{}
	for _, s := range srcs {
		data[s.Name] = s.Data
	}
	var visit func(error)
	visit = func(err error) {
		var ce *ConfigError
		switch e := err.(type) {
		case nil:
			return
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				visit(inner)
			}
			return
		}
		if errors.As(err, &ce) && ce.Line == 0 {
			if d, ok := data[ce.File]; ok {
				ce.Line = lineOf(d, ce.Path)
			}
		}
	}
	visit(err)
}
