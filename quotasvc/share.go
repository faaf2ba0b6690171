package quotasvc

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The fair split of one limit among the instances (Envoy streams) that
// report a bucket mapped to it, on every replica: docs/rlqs.md explains it.

// quota is a limit as the instances share it.
type quota struct {
	// rate is the tokens per second all instances get together.
	rate float64
	// capacity is the tokens all instances hold together at most (token
	// bucket, GCRA: the limit); 0 for the window algorithms, whose instances
	// each hold one interval of their rate, at most a tenth of a window's.
	capacity float64
	// window is the limit's window: no fill is longer (unless shorter than
	// a second), so the window algorithms' buckets hold at most a window's
	// worth together.
	window time.Duration
}

const (
	// floorShare is the least an instance weighs, as a part of an equal
	// share: a new or quiet instance gets at least this much, so it is not
	// starved before its demand is known.
	floorShare = 0.05
	// minTokensPerFill sets the fill interval: long enough that an average
	// instance gets this many tokens per fill, so rounding to whole tokens
	// costs at most a few percent of a share.
	minTokensPerFill = 20
	// maxFill is the longest fill interval.
	maxFill = 24 * time.Hour
)

// demand is what one instance asked for of a limit.
type demand struct {
	instance string
	// rate is requests per second, allowed and denied; negative when not
	// known yet (a new instance).
	rate float64
}

// grant is one instance's share, as a token bucket: tokens per fill every
// fill, holding at most max. tokens == 0 means deny all (more instances than
// tokens).
type grant struct {
	fill   time.Duration // whole seconds: Envoy reads only the seconds
	tokens uint32
	max    uint32
}

// rate is the grant's tokens per second.
func (g grant) rate() float64 {
	if g.tokens == 0 {
		return 0
	}
	return float64(g.tokens) / g.fill.Seconds()
}

// allocation is the split of one limit for one epoch: a grant per instance.
type allocation struct {
	epoch  int64
	fill   time.Duration
	grants map[string]grant
}

// grantOf returns instance's grant; a may be nil (no allocation).
func (a *allocation) grantOf(instance string) (grant, bool) {
	if a == nil {
		return grant{}, false
	}
	g, ok := a.grants[instance]
	return g, ok
}

// weights are the instances' claims: their demand, at least the floor
// (floorShare of an equal share), the floor when not known.
func weights(q quota, ds []demand) []float64 {
	floor := floorShare * q.rate / float64(len(ds))
	w := make([]float64, len(ds))
	for i, d := range ds {
		w[i] = max(d.rate, floor)
		if math.IsNaN(w[i]) || math.IsInf(w[i], 0) {
			w[i] = floor
		}
	}
	return w
}

// allocate splits q among the instances of ds, in proportion to their
// weights: tokens per fill by largest remainder, so the grants add up to the
// limit's tokens per fill and never more. interval is the reassignment
// interval (a window instance's bucket holds at least one interval of its
// rate). The result does not depend on the order of ds.
func allocate(q quota, interval time.Duration, epoch int64, ds []demand) allocation {
	a := allocation{epoch: epoch, grants: make(map[string]grant, len(ds))}
	if len(ds) == 0 {
		return a
	}
	ds = append([]demand(nil), ds...)
	sort.Slice(ds, func(i, j int) bool { return ds[i].instance < ds[j].instance })
	w := weights(q, ds)
	a.fill = fillInterval(q, len(ds))
	tokens := apportion(math.Floor(q.rate*a.fill.Seconds()), w)
	var caps []uint64
	if q.capacity > 0 {
		caps = apportion(math.Floor(q.capacity), w)
	}
	for i, d := range ds {
		g := grant{fill: a.fill, tokens: clampUint32(tokens[i])}
		if caps != nil {
			// Envoy refills continuously: a bucket smaller than a fill
			// still gets the whole rate.
			g.max = clampUint32(max(caps[i], 1))
		} else {
			g.max = windowMax(g, interval, q.window)
		}
		a.grants[d.instance] = g
	}
	return a
}

// newcomer is the grant of the k-th instance (from 0) to join an
// allocation of n instances, until the next allocation counts it: half the
// floor of n+1 instances, halved again for each newcomer before it. It comes
// on top of the allocation, so that all the newcomers of one epoch on one
// replica hold at most floorShare/(n+1) of the limit more than it, however
// many arrive at once (a cold start, a replica's Envoys reconnecting).
func newcomer(q quota, interval time.Duration, n, k int) grant {
	rate := floorShare * q.rate / float64(n+1) / math.Pow(2, float64(k+1))
	if !(rate > 0) {
		return grant{fill: maxFill, max: 1}
	}
	g := grant{fill: fillInterval(q, n+1)}
	if rate*g.fill.Seconds() < 1 {
		g.fill = min(time.Duration(math.Ceil(1/rate))*time.Second, maxFill)
	}
	g.tokens = clampUint32(uint64(math.Floor(rate * g.fill.Seconds())))
	if q.capacity > 0 {
		g.max = clampUint32(max(uint64(math.Floor(q.capacity*rate/q.rate)), 1))
	} else {
		g.max = windowMax(g, interval, q.window)
	}
	return g
}

// windowMax is the bucket size of a window limit's grant: one interval of
// its rate, at most a tenth of a window's, at least 2. So all instances
// together hold at most a tenth of the limit (and 2 tokens each): over any
// window they admit at most that much more, even when every bucket is full
// at once. It may be less than a fill: Envoy refills continuously, so a
// bucket smaller than a fill still gets the whole rate. A bucket of one
// token would not: full between two requests, it would drop what refills.
func windowMax(g grant, interval, window time.Duration) uint32 {
	if window > 0 {
		interval = min(interval, window/10)
	}
	return clampUint32(uint64(max(math.Floor(min(g.rate()*interval.Seconds(), math.MaxUint32)), 2)))
}

// fillInterval is the whole seconds in which n instances sharing q get
// minTokensPerFill tokens each on average: at least 1 s, at most q's window
// and maxFill.
func fillInterval(q quota, n int) time.Duration {
	longest := maxFill.Seconds()
	if q.window > 0 {
		longest = min(longest, max(math.Floor(q.window.Seconds()), 1))
	}
	if !(q.rate > 0) {
		return time.Duration(longest) * time.Second
	}
	secs := math.Ceil(minTokensPerFill * float64(n) / q.rate)
	return time.Duration(min(max(secs, 1), longest)) * time.Second
}

// apportion splits total (a whole number) in proportion to w by largest
// remainder: the parts add up to total; ties go to the lower index. When
// total allows, every part is at least 1, taken from the largest parts,
// which lose least by it.
func apportion(total float64, w []float64) []uint64 {
	parts := largestRemainder(total, w)
	if total >= float64(len(parts)) {
		for i := range parts {
			if parts[i] == 0 {
				parts[richest(parts)]--
				parts[i] = 1
			}
		}
	}
	return parts
}

// largestRemainder splits total in proportion to w: each part the floor of
// its exact share, and the rest one by one to the largest remainders.
func largestRemainder(total float64, w []float64) []uint64 {
	parts := make([]uint64, len(w))
	var sum float64
	for _, x := range w {
		sum += x
	}
	if !(total > 0) || !(sum > 0) {
		return parts
	}
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, len(w))
	var given float64
	for i, x := range w {
		exact := total * x / sum
		f := math.Floor(exact)
		parts[i] = uint64(f)
		given += f
		rems[i] = rem{i, exact - f}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; given < total && k < len(rems); k++ {
		parts[rems[k].i]++
		given++
	}
	return parts
}

// richest is the index of the largest part (the first of equals).
func richest(parts []uint64) int {
	best := 0
	for i, p := range parts {
		if p > parts[best] {
			best = i
		}
	}
	return best
}

func clampUint32(n uint64) uint32 {
	return uint32(min(n, math.MaxUint32))
}

// encode writes a as "epoch|fill seconds|instance:tokens:max,…", the form
// the usage store keeps. Instance ids hold none of '|', ':' and ','.
func (a allocation) encode() string {
	ids := make([]string, 0, len(a.grants))
	for id := range a.grants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	b.WriteString(strconv.FormatInt(a.epoch, 10))
	b.WriteByte('|')
	b.WriteString(strconv.FormatInt(int64(a.fill/time.Second), 10))
	b.WriteByte('|')
	for i, id := range ids {
		g := a.grants[id]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id)
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(uint64(g.tokens), 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(uint64(g.max), 10))
	}
	return b.String()
}

// decodeAllocation reads what encode wrote.
func decodeAllocation(s string) (allocation, error) {
	parts := strings.SplitN(s, "|", 3)
	if len(parts) != 3 {
		return allocation{}, fmt.Errorf("allocation %q: not epoch|fill|grants", s)
	}
	epoch, err1 := strconv.ParseInt(parts[0], 10, 64)
	fill, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || fill < 1 {
		return allocation{}, fmt.Errorf("allocation %q: bad epoch or fill", s)
	}
	a := allocation{epoch: epoch, fill: time.Duration(fill) * time.Second, grants: map[string]grant{}}
	if parts[2] == "" {
		return a, nil
	}
	for _, item := range strings.Split(parts[2], ",") {
		f := strings.Split(item, ":")
		if len(f) != 3 {
			return allocation{}, fmt.Errorf("allocation %q: bad grant %q", s, item)
		}
		tokens, err1 := strconv.ParseUint(f[1], 10, 32)
		mx, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil {
			return allocation{}, fmt.Errorf("allocation %q: bad grant %q", s, item)
		}
		a.grants[f[0]] = grant{fill: a.fill, tokens: uint32(tokens), max: uint32(mx)}
	}
	return a, nil
}
