// Package descriptors holds Envoy rate-limit descriptor configuration: the
// YAML format of Envoy's reference rate-limit service
// (github.com/envoyproxy/ratelimit), read strictly and with the same meaning,
// plus Throttle's extensions (algorithm, refill_rate; unit_multiplier for any
// window; always_count for costs reported after the response; rate_limits,
// several limits on one descriptor, all of which must admit a request);
// domains built from Go
// values (rules made through the REST API); the matcher that turns a request
// descriptor into a limit, a stats key and a counter identity; and a Reloader
// that follows a directory of YAML files (a Kubernetes ConfigMap).
//
// A configuration is made in two steps. A File is the model of one
// descriptor file as written (domain, descriptors, each Limit with its
// unit by name); Build checks Files and compiles them into a Config. Load
// reads YAML into Files (refusing what only YAML can get wrong: syntax,
// unknown keys, wrong types) and builds them; package xdsconfig makes a
// File of each xDS RateLimitConfig and builds those. Every other mistake is
// found by Build, so it reads the same whichever the source, but for the
// file:line, which a File made in Go has none of.
//
// Matching follows upstream exactly. A request descriptor is an ordered list
// of entries (key, value). At each level of the configuration tree the entry
// is looked up as, in order: the descriptor with that exact key and value;
// the first descriptor, in configuration order, with that key whose value is
// a wildcard matching the value ('*' matches zero or more characters,
// anywhere in the value); the descriptor with that key and no value (the
// default). A limit applies only when the lookup succeeds for every entry and
// the descriptor found for the last entry has a rate_limit. A descriptor with
// a key and value and no rate_limit therefore exempts (whitelists) that value.
package descriptors

import (
	"errors"
	"strconv"
)

// ErrInvalid marks configuration Throttle refuses. Every *ConfigError
// wraps it, so callers map it to a client error with errors.Is.
var ErrInvalid = errors.New("invalid descriptor configuration")

// ConfigError is one problem in a configuration. It wraps ErrInvalid.
type ConfigError struct {
	// File names the file as it was given to the loader (a path, or a bare
	// name), the File's Name for Build (`RateLimitConfig "edge"`), or the
	// rule ("rule 3") for NewDomain.
	File string
	// Path locates the problem inside the file, such as
	// `domain "edge" › descriptors[2] › rate_limit`; empty for the whole file.
	Path string
	// Msg says what is wrong, in upstream's words where upstream has them.
	Msg string
	// Line is the line of Path in File: where the descriptor, the
	// rate_limit key or the file's top-level mapping starts; for YAML that
	// does not parse, the line of the syntax error ('{', '[' or a quote
	// left open: where it opened). 0 for a rule, a File without lines, and
	// when unknown.
	Line int
}

// Error returns "file: path: message", or "file: message" without a path;
// "file:line: …" when the line is known.
func (e *ConfigError) Error() string {
	file := e.File
	if e.Line > 0 {
		file += ":" + strconv.Itoa(e.Line)
	}
	if e.Path == "" {
		return file + ": " + e.Msg
	}
	return file + ": " + e.Path + ": " + e.Msg
}

// Unwrap returns ErrInvalid.
func (e *ConfigError) Unwrap() error { return ErrInvalid }
