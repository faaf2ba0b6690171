package descriptors

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/throttle-rl/throttle/algorithms"
)

// Dump returns the configuration as text, one line per descriptor with a
// rate_limit, in the reference service's /rlconfig format:
//
//	<full key>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <bool>
//
// The full key is the domain and each level's key or key_value, joined with
// '.'. An unlimited descriptor shows unit=UNKNOWN, as upstream's does. Throttle's own settings follow only when they are set:
// ", unit_multiplier: <n>" (above 1), ", quota_mode: true",
// ", algorithm: <name>" (not fixed_window), ", refill_rate: <tokens per
// second>", ", always_count: true", ", accuracy: approximate", ", scope: global" and ", reserve: hits=<n>
// ttl=<duration> handle=<key>", so a configuration written for the
// reference service dumps line for line as there. A descriptor with several
// limits (rate_limits) has one line per limit, in configuration order, each
// ending in ", name: <name>" when the limit has one. Unlike upstream, which
// walks maps in random order, domains and the descriptors of each level come
// sorted by name. A nil Config dumps as "".
func (c *Config) Dump() string { return c.dump(false) }

// DumpInShadowMode is Dump as SHADOW_MODE makes it: every limit in shadow
// mode (decided and counted, never enforced), so every line says
// "shadow_mode: true".
func (c *Config) DumpInShadowMode() string { return c.dump(true) }

func (c *Config) dump(shadow bool) string {
	if c == nil {
		return ""
	}
	names := make([]string, 0, len(c.domains))
	for name := range c.domains {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		c.domains[name].root.dump(&b, shadow)
	}
	return b.String()
}

func (l *level) dump(b *strings.Builder, shadow bool) {
	nodes := make([]*node, 0, len(l.exact)+len(l.defaults))
	for _, n := range l.exact {
		nodes = append(nodes, n)
	}
	for _, n := range l.defaults {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].fullKey < nodes[j].fullKey })
	for _, n := range nodes {
		for _, lim := range n.limits {
			fmt.Fprintf(b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t", n.fullKey, lim.Unit, lim.RequestsPerUnit, n.shadowMode || shadow)
			if m := lim.Multiplier(); m > 1 {
				fmt.Fprintf(b, ", unit_multiplier: %d", m)
			}
			if n.quotaMode {
				b.WriteString(", quota_mode: true")
			}
			if a := lim.EngineAlgorithm(); !lim.Unlimited && a != algorithms.FixedWindow {
				fmt.Fprintf(b, ", algorithm: %s", a)
			}
			if lim.RefillRate != 0 {
				b.WriteString(", refill_rate: " + strconv.FormatFloat(lim.RefillRate, 'g', -1, 64))
			}
			if lim.AlwaysCount {
				b.WriteString(", always_count: true")
			}
			if lim.Accuracy == algorithms.Approximate && !lim.Unlimited {
				b.WriteString(", accuracy: approximate")
			}
			if lim.Global && !lim.Unlimited {
				b.WriteString(", scope: global")
			}
			if r := lim.Reserve; r != nil {
				fmt.Fprintf(b, ", reserve: hits=%d ttl=%s handle=%s", r.Hits, r.TTL, r.Handle)
			}
			if len(n.limits) > 1 && lim.Name != "" {
				fmt.Fprintf(b, ", name: %s", lim.Name)
			}
			b.WriteByte('\n')
		}
		n.children.dump(b, shadow)
	}
}
