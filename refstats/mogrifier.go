package refstats

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A Mogrifier rewrites a stat's name into a DogStatsD name and tags, as the
// reference's DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS} settings do:
// when Pattern matches the name, the stat is sent as Name with Tags, in
// both of which $0, $1, … stand for the whole match and its groups (a $N
// beyond the groups stays as it is).
type Mogrifier struct {
	pattern *regexp.Regexp
	name    string
	tags    [][2]string // key, value template; sorted by key
}

// NewMogrifier checks and compiles a mogrifier: pattern and name must not
// be empty, nor any tag's key or value.
func NewMogrifier(pattern, name string, tags map[string]string) (Mogrifier, error) {
	if pattern == "" {
		return Mogrifier{}, errors.New("no PATTERN")
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Mogrifier{}, fmt.Errorf("PATTERN %q: %w", pattern, err)
	}
	if name == "" {
		return Mogrifier{}, errors.New("no NAME")
	}
	m := Mogrifier{pattern: re, name: name}
	for k, v := range tags {
		if k == "" || v == "" {
			return Mogrifier{}, fmt.Errorf("TAGS: tag %q:%q has an empty key or value", k, v)
		}
		m.tags = append(m.tags, [2]string{k, v})
	}
	slices.SortFunc(m.tags, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return m, nil
}

// placeholder is $N in a mogrifier's name or tag.
var placeholder = regexp.MustCompile(`\$\d+`)

// expand replaces each $N of template by matches[N].
func expand(template string, matches []string) string {
	if !strings.Contains(template, "$") {
		return template
	}
	return placeholder.ReplaceAllStringFunc(template, func(p string) string {
		i, err := strconv.Atoi(p[1:])
		if err != nil || i >= len(matches) {
			return p
		}
		return matches[i]
	})
}

// mogrify applies the first of ms whose pattern matches name; name and no
// tags when none does.
func mogrify(ms []Mogrifier, name string) (string, []string) {
	for _, m := range ms {
		matches := m.pattern.FindStringSubmatch(name)
		if matches == nil {
			continue
		}
		tags := make([]string, len(m.tags))
		for i, t := range m.tags {
			tags[i] = t[0] + ":" + expand(t[1], matches)
		}
		return expand(m.name, matches), tags
	}
	return name, nil
}

// splitTags separates the tags gostats writes into a name
// (NAME.__KEY=VALUE.__KEY2=VALUE2: EXTRA_TAGS) from the name, as DogStatsD
// tags KEY:VALUE. A tag without '=' is dropped.
func splitTags(name string) (string, []string) {
	const prefix, sep = ".__", "="
	short, rest, ok := strings.Cut(name, prefix)
	if !ok {
		return name, nil
	}
	pairs := strings.Split(rest, prefix)
	tags := make([]string, 0, len(pairs))
	for _, p := range pairs {
		if k, v, ok := strings.Cut(p, sep); ok {
			tags = append(tags, k+":"+v)
		}
	}
	return short, tags
}
