package quotasvc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func demands(rates ...float64) []demand {
	ds := make([]demand, len(rates))
	for i, r := range rates {
		ds[i] = demand{instance: fmt.Sprintf("i%02d", i), rate: r}
	}
	return ds
}

// tokensOf lists the grants' tokens per fill in instance order.
func tokensOf(a allocation, n int) []uint32 {
	out := make([]uint32, n)
	for i := range n {
		out[i] = a.grants[fmt.Sprintf("i%02d", i)].tokens
	}
	return out
}

func TestAllocateSplitsByDemand(t *testing.T) {
	second := quota{rate: 1000} // 1000 per second, a window limit
	tests := []struct {
		name  string
		q     quota
		rates []float64
		fill  time.Duration
		want  []uint32
	}{
		{"over the limit: in proportion", second, []float64{400, 600, 1000}, time.Second, []uint32{200, 300, 500}},
		{"under the limit: the headroom too", second, []float64{100, 100, 200}, time.Second, []uint32{250, 250, 500}},
		{"equal demand", second, []float64{700, 700, 700}, time.Second, []uint32{334, 333, 333}},
		{"not known yet: equal shares", second, []float64{-1, -1}, time.Second, []uint32{500, 500}},
		{"quiet instance keeps the floor", quota{rate: 1000}, []float64{0, 1000, 1000}, time.Second, []uint32{8, 496, 496}},
		{"new instance weighs the floor", quota{rate: 1000}, []float64{-1, 3000}, time.Second, []uint32{8, 992}},
		// 10 per minute among 3: 10 tokens a minute (no fill longer than
		// the window).
		{"low rate: a longer fill", quota{rate: 10.0 / 60, window: time.Minute}, []float64{5, 5, 5}, time.Minute, []uint32{4, 3, 3}},
		// 10 per minute, a token bucket: the rate is the limit.
		{"low rate, no window", quota{rate: 10.0 / 60}, []float64{5, 5, 5}, 360 * time.Second, []uint32{20, 20, 20}},
		// 1 per day among 3: one token a day, for one of them.
		{"fewer tokens than instances", quota{rate: 1.0 / 86400, window: 24 * time.Hour}, []float64{1, 2, 1}, maxFill, []uint32{0, 1, 0}},
		// A hundred instances at 1000/s: 2 s fills, at least one token each.
		{"every instance at least one token", quota{rate: 1000}, append([]float64{0.001}, repeat(100, 99)...), 2 * time.Second, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := allocate(tt.q, time.Second, 7, demands(tt.rates...))
			if a.fill != tt.fill {
				t.Errorf("fill = %v, want %v", a.fill, tt.fill)
			}
			got := tokensOf(a, len(tt.rates))
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("tokens per fill (-want +got):\n%s", diff)
				}
			}
			var sum uint64
			for _, g := range got {
				sum += uint64(g)
			}
			if want := uint64(math.Floor(tt.q.rate * a.fill.Seconds())); sum != want {
				t.Errorf("tokens per fill add up to %d, want the limit's %d", sum, want)
			}
			if tt.want == nil {
				for i, g := range got {
					if g == 0 {
						t.Errorf("instance %d has no token", i)
					}
				}
			}
		})
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// However the demands look, the grants never add up to more than the limit
// (rate and capacity), every instance with a share of at least a token gets
// one, and the split does not depend on the order of the instances.
func TestAllocateNeverExceedsTheLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		n := 1 + r.IntN(40)
		q := quota{rate: math.Pow(10, r.Float64()*7-2)} // 0.01 … 100000 per second
		if r.IntN(2) == 0 {
			q.window = time.Duration(1+r.IntN(3600)) * time.Second
		}
		if r.IntN(2) == 0 {
			q.capacity = math.Floor(q.rate * (1 + r.Float64()*100))
		}
		rates := make([]float64, n)
		for i := range rates {
			switch r.IntN(4) {
			case 0:
				rates[i] = -1
			case 1:
				rates[i] = 0
			default:
				rates[i] = r.Float64() * q.rate * 3
			}
		}
		ds := demands(rates...)
		a := allocate(q, 500*time.Millisecond, 1, ds)
		var rate, capacity float64
		for _, g := range a.grants {
			if g.fill != a.fill || g.fill < time.Second || g.fill > maxFill || g.fill%time.Second != 0 || (q.window > 0 && g.fill > max(q.window, time.Second)) {
				t.Fatalf("trial %d: fill %v", trial, g.fill)
			}
			rate += g.rate()
			capacity += float64(g.max)
			if q.capacity == 0 && g.tokens > 0 && float64(g.max) > max(2, g.rate()*0.5) {
				t.Fatalf("trial %d: window bucket of %d holds more than an interval (0.5 s) of %v/s", trial, g.max, g.rate())
			}
			if q.capacity == 0 && q.window > 0 && g.tokens > 0 && float64(g.max) > max(2, g.rate()*q.window.Seconds()/10) {
				t.Fatalf("trial %d: window bucket of %d holds more than a tenth of a %v window of %v/s", trial, g.max, q.window, g.rate())
			}
		}
		if rate > q.rate*(1+1e-9) {
			t.Fatalf("trial %d: grants add up to %v/s, limit %v/s (%d instances)", trial, rate, q.rate, n)
		}
		if q.capacity >= float64(n) && capacity > q.capacity {
			t.Fatalf("trial %d: buckets hold %v, capacity %v", trial, capacity, q.capacity)
		}
		reversed := make([]demand, n)
		for i, d := range ds {
			reversed[n-1-i] = d
		}
		if diff := cmp.Diff(a, allocate(q, 500*time.Millisecond, 1, reversed), cmp.AllowUnexported(allocation{}, grant{})); diff != "" {
			t.Fatalf("trial %d: order changes the split:\n%s", trial, diff)
		}
	}
}

func TestAllocateBuckets(t *testing.T) {
	// A token bucket of 100, refilled at 10/s, among two: capacity and
	// rate in proportion (1:3), in 2 s fills.
	a := allocate(quota{rate: 10, capacity: 100}, time.Second, 1, demands(5, 15))
	want := map[string]grant{
		"i00": {fill: 4 * time.Second, tokens: 10, max: 25},
		"i01": {fill: 4 * time.Second, tokens: 30, max: 75},
	}
	if diff := cmp.Diff(want, a.grants, cmp.AllowUnexported(grant{})); diff != "" {
		t.Errorf("token bucket grants (-want +got):\n%s", diff)
	}
	// A window limit's bucket holds one interval of its rate, at most a
	// tenth of a window's.
	a = allocate(quota{rate: 100, window: 20 * time.Second}, 500*time.Millisecond, 1, demands(50, 50))
	if g := a.grants["i00"]; g.tokens != 50 || g.max != 25 {
		t.Errorf("window grant = %+v, want 50 per 1 s fill, 25 held (0.5 s of 50/s)", g)
	}
	a = allocate(quota{rate: 100, window: 2 * time.Second}, 3*time.Second, 1, demands(50, 50))
	if g := a.grants["i00"]; g.tokens != 50 || g.max != 10 {
		t.Errorf("window grant = %+v, want 50 per 1 s fill, 10 held (a tenth of the 2 s window of 50/s)", g)
	}
}

func TestNewcomer(t *testing.T) {
	q := quota{rate: 1000, window: time.Second}
	tests := []struct {
		name string
		q    quota
		n, k int
		want grant
	}{
		// Four instances in the split: the first newcomer gets half the
		// floor of five, 0.05 × 1000/5 / 2; the next one half of that.
		{"first", q, 4, 0, grant{fill: time.Second, tokens: 5, max: 2}},
		{"second", q, 4, 1, grant{fill: time.Second, tokens: 2, max: 2}},
		{"longer window", quota{rate: 1000, window: time.Minute}, 4, 0, grant{fill: time.Second, tokens: 5, max: 5}},
		// 10 per hour, alone: a token every 4 hours, a fill longer than
		// the window.
		{"slow", quota{rate: 10.0 / 3600, window: time.Hour}, 0, 0, grant{fill: 14400 * time.Second, tokens: 1, max: 2}},
		// A token bucket: the same part of the capacity as of the rate.
		{"token bucket", quota{rate: 100, capacity: 1000, window: 10 * time.Second}, 1, 0, grant{fill: time.Second, tokens: 1, max: 12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newcomer(tt.q, time.Second, tt.n, tt.k); got != tt.want {
				t.Errorf("newcomer(%d, %d) = %+v, want %+v", tt.n, tt.k, got, tt.want)
			}
		})
	}
	// However many arrive at once, the newcomers hold at most half the floor
	// more than the allocation, 0.05 × 1000/5 / 2 … → at most 10/s.
	var sum float64
	for k := range 50 {
		sum += newcomer(q, time.Second, 4, k).rate()
	}
	if sum > 10 {
		t.Errorf("50 newcomers hold %v/s, want at most 10/s", sum)
	}
}

func TestAllocationEncoding(t *testing.T) {
	a := allocate(quota{rate: 1000, capacity: 2000}, time.Second, 123456789, demands(100, 200, 300))
	b, err := decodeAllocation(a.encode())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b, cmp.AllowUnexported(allocation{}, grant{})); diff != "" {
		t.Errorf("decode(encode) (-want +got):\n%s", diff)
	}
	if got := a.encode(); got != "123456789|1|i00:167:333,i01:333:667,i02:500:1000" {
		t.Errorf("encode = %q", got)
	}
	for _, bad := range []string{"", "1|2", "x|1|", "1|0|", "1|1|a:1", "1|1|a:1:x", "1|1|a:-1:2"} {
		if _, err := decodeAllocation(bad); err == nil {
			t.Errorf("decodeAllocation(%q) accepted", bad)
		}
	}
}
