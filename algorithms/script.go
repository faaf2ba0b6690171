package algorithms

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// The Go side of batch.lua: how a batch is packed into the script's
// arguments, and how its reply — the state each request found, and whether
// it was within its limit — becomes decisions, computed by decide.go as the
// memory store computes them.

// packedSize is the size of one request in ARGV[2]: algorithm, flags,
// group, then limit, window µs or refill rate, and hits as doubles.
const packedSize = 1 + 1 + 2 + 3*8

// The flags of a packed request.
const (
	flagIndexed      = 1
	flagAlwaysCount  = 2
	flagAllOrNothing = 4
)

// algNumber is an algorithm's number in the packed requests (algs in
// batch.lua).
func algNumber(a Algorithm) byte {
	switch a {
	case FixedWindow:
		return 1
	case SlidingWindow:
		return 2
	case TokenBucket:
		return 3
	case GCRA:
		return 4
	}
	return 0
}

// groups calls f(from, to) for each caller's part of a batch: sizes are the
// callers' batch lengths, nil for a batch of one caller.
func groups(n int, sizes []int, f func(g, from, to int)) {
	if sizes == nil {
		f(0, 0, n)
		return
	}
	from := 0
	for g, size := range sizes {
		f(g, from, from+size)
		from += size
	}
}

// allOrNothing reports, for each caller's part, whether it has requests
// tied together: two or more AllOrNothing requests (one alone has nothing
// to be tied to).
func allOrNothing(reqs []Request) bool {
	n := 0
	for i := range reqs {
		if reqs[i].AllOrNothing {
			n++
		}
	}
	return n > 1
}

// scriptArgs returns the keys and arguments of one script call deciding
// reqs. inArgv puts the keys in ARGV (a Redis Cluster: only the first key is
// declared, to route the call).
func (s *RedisStore) scriptArgs(reqs []Request, sizes []int, now string, inArgv bool) ([]string, []any) {
	keys := make([]string, len(reqs))
	blob := make([]byte, 0, packedSize*len(reqs))
	var members []any
	groups(len(reqs), sizes, func(g, from, to int) {
		tied := allOrNothing(reqs[from:to])
		for i := from; i < to; i++ {
			r := &reqs[i]
			keys[i] = s.stateKey(r)
			var flags byte
			if !r.Unindexed {
				flags |= flagIndexed
				members = append(members, stateMember(r))
			}
			if r.AlwaysCount {
				flags |= flagAlwaysCount
			}
			if tied && r.AllOrNothing {
				flags |= flagAllOrNothing
			}
			third := float64(r.Limit.Window.Microseconds())
			if r.Limit.Algorithm == TokenBucket {
				third = r.Limit.Refill()
			}
			blob = append(blob, algNumber(r.Limit.Algorithm), flags)
			blob = binary.LittleEndian.AppendUint16(blob, uint16(g))
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(float64(r.Limit.Limit)))
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(third))
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(float64(r.Hits)))
		}
	})
	if !inArgv {
		args := make([]any, 0, 3+len(members))
		args = append(args, now, blob, "")
		return keys, append(args, members...)
	}
	args := make([]any, 0, 3+len(keys)+len(members))
	args = append(args, now, blob, strconv.Itoa(len(keys)))
	for _, k := range keys {
		args = append(args, k)
	}
	return keys[:1], append(args, members...)
}

// found is what the script found of one request: whether its hits were
// within the limit, and the state before it counted them.
type found struct {
	within bool
	window windowState
	tokens *tokenState
	cell   *gcraState
}

// decodeReply turns the script's reply (the time, then each request's
// values, as batch.lua says) into decisions.
func decodeReply(res []any, reqs []Request, sizes []int) ([]Decision, error) {
	r := replyReader{res: res}
	nowUS := r.int()
	fs := make([]found, len(reqs))
	for i := range reqs {
		fs[i] = r.found(&reqs[i], nowUS)
	}
	if r.err == nil && r.at != len(res) {
		r.err = fmt.Errorf("%d values in the reply, %d read", len(res), r.at)
	}
	if r.err != nil {
		return nil, fmt.Errorf("redis: script reply: %w", r.err)
	}
	return decideAll(reqs, sizes, fs, nowUS)
}

// decideAll turns what Redis found of each request into decisions: each
// caller's all-or-nothing requests are void when one of them is over.
func decideAll(reqs []Request, sizes []int, fs []found, nowUS int64) ([]Decision, error) {
	out := make([]Decision, len(reqs))
	var err error
	groups(len(reqs), sizes, func(_, from, to int) {
		voided := false
		if allOrNothing(reqs[from:to]) {
			for i := from; i < to; i++ {
				voided = voided || (reqs[i].AllOrNothing && !fs[i].within)
			}
		}
		for i := from; i < to; i++ {
			d, within := decideFound(&reqs[i], &fs[i], nowUS, voided)
			if within != fs[i].within && err == nil {
				err = fmt.Errorf("redis: request %d: Redis found it within its limit: %v, Go: %v", i, fs[i].within, within)
			}
			out[i] = d
		}
	})
	return out, err
}

// decideFound is the decision of r on the state the script found: counted
// unless its all-or-nothing group was voided (by a request over its limit).
func decideFound(r *Request, f *found, nowUS int64, voided bool) (Decision, bool) {
	counted := r.AlwaysCount || !(voided && r.AllOrNothing)
	hits := r.Hits
	o, within := decideState(r, f, nowUS, hits)
	if o.wrote && !counted {
		// Within its limit, but not counted: say what the state is.
		o, _ = decideState(r, f, nowUS, 0)
		o.allowed = true
	}
	var d Decision
	o.writeTo(&d, r.Limit.Limit, nowUS)
	d.Counted = o.wrote && counted
	return d, within
}

// decideState applies r's algorithm to the state the script found.
func decideState(r *Request, f *found, nowUS, hits int64) (outcome, bool) {
	l := &r.Limit
	var o outcome
	switch l.Algorithm {
	case FixedWindow:
		_, o = decideFixed(&f.window, nowUS, l.Window.Microseconds(), l.Limit, hits, r.AlwaysCount)
	case SlidingWindow:
		_, o = decideSliding(&f.window, nowUS, l.Window.Microseconds(), l.Limit, hits, r.AlwaysCount)
	case TokenBucket:
		_, o = decideToken(f.tokens, nowUS, l.Limit, l.Refill(), hits, r.AlwaysCount)
	case GCRA:
		_, o = decideGCRA(f.cell, nowUS, l.Window.Microseconds(), l.Limit, hits, r.AlwaysCount)
	}
	return o, o.allowed
}

// replyReader reads the script's reply value by value; the first error
// sticks.
type replyReader struct {
	res []any
	at  int
	err error
}

func (r *replyReader) next() any {
	if r.err != nil {
		return nil
	}
	if r.at >= len(r.res) {
		r.err = fmt.Errorf("the reply ends after %d values", len(r.res))
		return nil
	}
	v := r.res[r.at]
	r.at++
	return v
}

func (r *replyReader) int() int64 {
	v := r.next()
	n, ok := v.(int64)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("value %d is %T, not an integer", r.at-1, v)
	}
	return n
}

// str reads a stored field: a string, or nil when the state has none.
func (r *replyReader) str() (string, bool) {
	switch v := r.next().(type) {
	case nil:
		return "", false
	case string:
		return v, true
	default:
		if r.err == nil {
			r.err = fmt.Errorf("value %d is %T, not a string", r.at-1, v)
		}
		return "", false
	}
}

func (r *replyReader) number(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("value %d: %w", r.at-1, err)
	}
	return f
}

// found reads what the script appended for q.
func (r *replyReader) found(q *Request, nowUS int64) found {
	var f found
	switch q.Limit.Algorithm {
	case FixedWindow, SlidingWindow:
		w := q.Limit.Window.Microseconds()
		c := r.int()
		f.within = c >= 0
		if !f.within {
			c = -c - 1
		}
		f.window = windowState{start: nowUS - nowUS%w, count: c}
		if q.Limit.Algorithm == SlidingWindow {
			f.window.prev = r.int()
		}
	case TokenBucket:
		f.within = r.int() == 1
		t, ok := r.str()
		ts, _ := r.str()
		if ok {
			f.tokens = &tokenState{tokens: r.number(t), ts: int64(r.number(ts))}
		}
	case GCRA:
		f.within = r.int() == 1
		t, ok := r.str()
		rem, _ := r.str()
		if ok {
			f.cell = &gcraState{tat: int64(r.number(t)), rem: int64(r.number(rem))}
		}
	}
	return f
}
