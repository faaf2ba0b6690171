package descriptors

// File is one descriptor YAML file, as read and checked by Parse.
type File struct {
	// Name is where the file came from; errors name it.
	Name string
	// Domain is required.
	Domain string
	// Descriptors are the top-level descriptors, in file order.
	Descriptors []Descriptor
	// Line is where the file's top-level mapping starts: the line of
	// problems of the whole file.
	Line int
}

// Descriptor is one descriptor of a File, with upstream's fields.
type Descriptor struct {
	Key   string // required
	Value string // optional; '*' makes it a wildcard
	// RateLimit is the limit, or nil: no limit at this level.
	RateLimit *RateLimit
	// RateLimits are the limits of a descriptor with several (Throttle's
	// rate_limits: burst and sustained on one key), all of which must admit
	// a request; nil when it has none or RateLimit. A descriptor has one or
	// the other, never both.
	RateLimits     []RateLimit
	Descriptors    []Descriptor
	ShadowMode     bool
	DetailedMetric bool
	ShareThreshold bool
	ValueToMetric  bool
	QuotaMode      bool
	// Metadata is free-form; values are JSON-compatible (map[string]any,
	// []any, string, int, float64, bool, nil).
	Metadata map[string]any
	// Line is where the descriptor starts in the file.
	Line int
}

func (d Descriptor) spec() nodeSpec {
	limits := d.RateLimits
	if d.RateLimit != nil {
		limits = []RateLimit{*d.RateLimit}
	}
	return nodeSpec{
		key:            d.Key,
		value:          d.Value,
		limits:         limits,
		shadowMode:     d.ShadowMode,
		detailedMetric: d.DetailedMetric,
		shareThreshold: d.ShareThreshold,
		valueToMetric:  d.ValueToMetric,
		quotaMode:      d.QuotaMode,
		metadata:       d.Metadata,
	}
}
