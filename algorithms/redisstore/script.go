package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/throttle-rl/throttle/algorithms"
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
	// flagHold = 8 (holds.go)
)

// algNumber is an algorithm's number in the packed requests (algs in
// batch.lua).
func algNumber(a algorithms.Algorithm) byte {
	switch a {
	case algorithms.FixedWindow:
		return 1
	case algorithms.SlidingWindow:
		return 2
	case algorithms.TokenBucket:
		return 3
	case algorithms.GCRA:
		return 4
	}
	return 0
}

// scriptArgs returns the keys and arguments of one script call deciding
// reqs, packed for its master (router.pack): after the state keys, each
// indexed request's member and each hold's arguments (holdArgs), in order.
func (s *Store) scriptArgs(reqs []algorithms.Request, sizes []int, now string) ([]string, []any) {
	keys := make([]string, len(reqs))
	blob := make([]byte, 0, packedSize*len(reqs))
	var members []any
	algorithms.Groups(len(reqs), sizes, func(g, from, to int) {
		tied := algorithms.Tied(reqs[from:to])
		for i := from; i < to; i++ {
			r := &reqs[i]
			keys[i] = s.stateKey(r)
			var flags byte
			if !r.Unindexed {
				flags |= flagIndexed
				members = append(members, algorithms.StateName(r))
			}
			if r.AlwaysCount {
				flags |= flagAlwaysCount
			}
			if tied && r.AllOrNothing {
				flags |= flagAllOrNothing
			}
			if r.Hold != nil {
				flags |= flagHold
				members = s.holdArgs(members, r, keys[i])
			}
			third := float64(r.Limit.Window.Microseconds())
			if r.Limit.Algorithm == algorithms.TokenBucket {
				third = r.Limit.Refill()
			}
			blob = append(blob, algNumber(r.Limit.Algorithm), flags)
			blob = binary.LittleEndian.AppendUint16(blob, uint16(g))
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(float64(r.Limit.Limit)))
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(third))
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(float64(r.Hits)))
		}
	})
	args := make([]any, 0, 3+len(members))
	args = append(args, now, blob, "")
	return s.route.pack(keys, append(args, members...), 2)
}

// decodeReply turns the script's reply (the time, then each request's
// values, as batch.lua says) into decisions.
func decodeReply(res []any, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
	r := replyReader{res: res}
	nowUS := r.int()
	fs := make([]algorithms.Found, len(reqs))
	for i := range reqs {
		fs[i] = r.found(&reqs[i])
	}
	if r.err == nil && r.at != len(res) {
		r.err = fmt.Errorf("%d values in the reply, %d read", len(res), r.at)
	}
	if r.err != nil {
		return nil, fmt.Errorf("redis: script reply: %w", r.err)
	}
	ds, err := algorithms.DecideFound(reqs, sizes, fs, nowUS)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	setHoldExpires(reqs, ds)
	return ds, nil
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
func (r *replyReader) found(q *algorithms.Request) algorithms.Found {
	var f algorithms.Found
	switch q.Limit.Algorithm {
	case algorithms.FixedWindow, algorithms.SlidingWindow:
		c := r.int()
		f.Within = c >= 0
		if !f.Within {
			c = -c - 1
		}
		f.Count = c
		if q.Limit.Algorithm == algorithms.SlidingWindow {
			f.Prev = r.int()
		}
	case algorithms.TokenBucket:
		f.Within = r.int() == 1
		t, ok := r.str()
		ts, _ := r.str()
		if ok {
			f.Exists, f.Tokens, f.At = true, r.number(t), int64(r.number(ts))
		}
	case algorithms.GCRA:
		f.Within = r.int() == 1
		t, ok := r.str()
		rem, _ := r.str()
		if ok {
			f.Exists, f.TAT, f.Rem = true, int64(r.number(t)), int64(r.number(rem))
		}
	}
	return f
}
