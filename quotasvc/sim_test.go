package quotasvc_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The simulated data plane against the built binary: Envoy-like instances
// (dataPlane) spread over two replicas on one Redis, each driven by its own
// demand, all sharing one limit of 1000 requests per second per scenario.
// What is measured, per scenario: requests admitted per one-second window
// against the limit, the time shares take to follow demand when it moves,
// and the servers' CPU per report. What is asserted: every window at most
// 110 % of the limit; every window once shares settle within ±5 %; shares
// rebalanced within two intervals of a move; and, when a replica stops, its
// instances reconnect to the other and get assignments within one interval.

const (
	simLimit    = 1000                   // per second, per scenario
	simInterval = 500 * time.Millisecond // RLQS_INTERVAL: reassignment
	// simReport is the instances' reporting_interval: a third of an
	// interval, as docs/rlqs.md advises, so that the report after the one
	// a move straddles (which counts part old, part new demand) comes
	// within two thirds of an interval of the move, and the next
	// reassignment within 1⅔ intervals.
	simReport = simInterval / 3
	simBin    = 50 * time.Millisecond
	simWarmup = 3 * time.Second
	simDemand = 2.0 // total demand, times the limit
)

const simYAML = `domain: sim
descriptors:
  - key: scenario
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// scenario is one bucket shared by n instances with a demand profile.
type scenario struct {
	name   string
	n      int
	shifts []time.Duration // when heavy and light instances swap
	// weight is instance i's share of the demand in phase p (0: before the
	// first shift).
	weight func(i, phase int) float64

	planes []*dataPlane
	rec    *recorder
}

func steady(n int) *scenario {
	return &scenario{name: fmt.Sprintf("steady%d", n), n: n, weight: func(i, _ int) float64 { return float64(1 + i) }}
}

// shifting: the first half of the instances want three times what the
// others want, then the other way round, then back.
func shifting(n int, at ...time.Duration) *scenario {
	return &scenario{name: fmt.Sprintf("shift%d", n), n: n, shifts: at, weight: func(i, phase int) float64 {
		heavy := i < (n+1)/2
		if phase%2 == 1 {
			heavy = !heavy
		}
		if heavy {
			return 3
		}
		return 1
	}}
}

func (sc *scenario) phase(t time.Duration) int {
	p := 0
	for _, s := range sc.shifts {
		if t >= s {
			p++
		}
	}
	return p
}

// demand is instance i's requests per second at t.
func (sc *scenario) demand(i int, t time.Duration) float64 {
	p := sc.phase(t)
	var sum float64
	for j := range sc.n {
		sum += sc.weight(j, p)
	}
	return simDemand * simLimit * sc.weight(i, p) / sum
}

// fair is instance i's fair share at t: the limit in proportion to demand.
func (sc *scenario) fair(i int, t time.Duration) float64 {
	return sc.demand(i, t) / simDemand
}

// recorder counts admitted requests per instance in bins of simBin.
type recorder struct {
	start    time.Time
	admitted [][]atomic.Int64
}

func newRecorder(start time.Time, n int, d time.Duration) *recorder {
	r := &recorder{start: start, admitted: make([][]atomic.Int64, n)}
	for i := range r.admitted {
		r.admitted[i] = make([]atomic.Int64, int(d/simBin)+1)
	}
	return r
}

func (r *recorder) add(i int, at time.Time) {
	b := int(at.Sub(r.start) / simBin)
	if b >= 0 && b < len(r.admitted[i]) {
		r.admitted[i][b].Add(1)
	}
}

// sum is the requests instance i admitted in [from, to) (-1: all of them).
func (r *recorder) sum(i int, from, to time.Duration) int64 {
	var n int64
	for j := range r.admitted {
		if i >= 0 && j != i {
			continue
		}
		for b := int(from / simBin); b < int(to/simBin) && b < len(r.admitted[j]); b++ {
			n += r.admitted[j][b].Load()
		}
	}
	return n
}

// drive offers every instance's demand to its data plane until end, each
// request at its scheduled time (a late driver catches up with the requests
// it owes, decided as at their times), or until ctx ends.
func (sc *scenario) drive(ctx context.Context, end time.Time) {
	bucket := map[string]string{"scenario": sc.name}
	next := make([]time.Time, sc.n) // each instance's next arrival
	for i := range next {
		next[i] = sc.rec.start
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		last := !now.Before(end)
		if last {
			now = end
		}
		for i, d := range sc.planes {
			for next[i].Before(now) {
				at := next[i]
				d.advance(at)
				if d.request(bucket, at) {
					sc.rec.add(i, at)
				}
				next[i] = at.Add(time.Duration(float64(time.Second) / sc.demand(i, at.Sub(sc.rec.start))))
			}
			d.advance(now)
		}
		if last {
			return
		}
	}
}

// windows returns admitted/limit of every whole second in [from, to).
func (sc *scenario) windows(from, to time.Duration) []float64 {
	var out []float64
	for w := from; w+time.Second <= to; w += time.Second {
		out = append(out, float64(sc.rec.sum(-1, w, w+time.Second))/simLimit)
	}
	return out
}

// settling reports whether the window starting at w overlaps the two
// intervals after a shift.
func (sc *scenario) settling(w time.Duration) bool {
	for _, s := range sc.shifts {
		if w < s+2*simInterval && w+time.Second > s {
			return true
		}
	}
	return false
}

// rebalance is the time from the shift at s until the split follows the
// new demand: the first moment at which every instance's assignment (the
// last it received) is within 10 % of its new fair share. -1 when that does
// not happen before until. (That it stays there shows in the windows.)
func (sc *scenario) rebalance(s, until time.Duration) time.Duration {
	bucket := map[string]string{"scenario": sc.name}
	histories := make([][]assigned, sc.n)
	var times []time.Duration
	for i, dp := range sc.planes {
		histories[i] = dp.assignments(bucket)
		for _, a := range histories[i] {
			if at := a.at.Sub(sc.rec.start); at >= s && at < until {
				times = append(times, at)
			}
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	for _, t := range times {
		all := true
		for i, h := range histories {
			var rate float64 = -1
			for _, a := range h {
				if a.at.Sub(sc.rec.start) <= t {
					rate = a.rate
				}
			}
			if want := sc.fair(i, s); math.Abs(rate-want) > 0.10*want {
				all = false
				break
			}
		}
		if all {
			return t - s
		}
	}
	return -1
}

// logAssignments logs what every instance was assigned around the shift at
// s, and its new fair share.
func (sc *scenario) logAssignments(t *testing.T, s time.Duration) {
	bucket := map[string]string{"scenario": sc.name}
	for i, dp := range sc.planes {
		var row []string
		for _, a := range dp.assignments(bucket) {
			if at := a.at.Sub(sc.rec.start); at > s-simInterval && at < s+4*simInterval {
				row = append(row, fmt.Sprintf("%.3fs:%.0f", at.Seconds(), a.rate))
			}
		}
		t.Logf("%s instance %d (fair %.0f): %s", sc.name, i, sc.fair(i, s), strings.Join(row, " "))
	}
}

// recovered is the time from the shift at s until the instances admit what
// the split says: from then on, every span of one interval (sliding by
// simBin) until until has every instance within 10 % of its fair share and
// all of them within 5 % of the limit. -1 when never.
func (sc *scenario) recovered(s, until time.Duration) time.Duration {
	ok := func(t time.Duration) bool {
		total := float64(sc.rec.sum(-1, t, t+simInterval)) / simInterval.Seconds()
		if math.Abs(total-simLimit) > 0.05*simLimit {
			return false
		}
		for i := range sc.n {
			got := float64(sc.rec.sum(i, t, t+simInterval)) / simInterval.Seconds()
			if want := sc.fair(i, t); math.Abs(got-want) > 0.10*want {
				return false
			}
		}
		return true
	}
	for t := s; t+simInterval <= until; t += simBin {
		settled := true
		for u := t; u+simInterval <= until; u += simBin {
			if !ok(u) {
				settled = false
				break
			}
		}
		if settled {
			return t - s
		}
	}
	return -1
}

// procCPU is a process's CPU time (utime + stime of /proc/PID/stat, in
// ticks of USER_HZ, 100 on Linux).
func procCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

type simCluster struct {
	replicas []*throttletest.Server
}

func (c *simCluster) addrs() []string {
	var out []string
	for _, r := range c.replicas {
		out = append(out, r.GRPCAddr)
	}
	return out
}

// usage is the replicas' CPU so far and the reports they took.
func (c *simCluster) usage(t testing.TB) (cpu time.Duration, reports float64) {
	for _, r := range c.replicas {
		cpu += procCPU(t, r.PID())
		reports += r.Metric(t, "throttle_rlqs_reports_total")
	}
	return cpu, reports
}

// run drives the scenarios together for d, with every instance i starting
// on replica i mod 2, and calls during (when set) at its time.
func (c *simCluster) run(t *testing.T, d time.Duration, during func(elapsed time.Duration), scs ...*scenario) {
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, sc := range scs {
		sc.rec = newRecorder(start, sc.n, d)
		for i := range sc.n {
			addrs := c.addrs()
			first := i % len(addrs)
			rotated := append(append([]string{}, addrs[first:]...), addrs[:first]...)
			dp := newDataPlane(t, "sim", simReport, rotated...)
			// Until Throttle's first answer (a few ms; longer on a machine
			// as busy as the test suite makes it), deny: a cold start that
			// allowed all would admit whatever the machine's delay let
			// through, which says nothing of the split.
			dp.noAssignment = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
			sc.planes = append(sc.planes, dp)
		}
	}
	for _, sc := range scs {
		wg.Add(1)
		go func() { defer wg.Done(); sc.drive(ctx, start.Add(d)) }()
	}
	defer cancel()
	if during != nil {
		during(time.Since(start))
	}
	wg.Wait() // every request until start+d offered
	for _, sc := range scs {
		for _, dp := range sc.planes {
			dp.close()
		}
	}
}

func TestSimulatedDataPlane(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sim.yaml"), []byte(simYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &simCluster{}
	// CLAIMABLE_DOMAINS: the REST client below may have its domain.
	env := []string{"REDIS_URL=" + rs.URL(), "DESCRIPTORS_DIR=" + dir, "RLQS_INTERVAL=" + simInterval.String(), "CLAIMABLE_DOMAINS=simrest"}
	if os.Getenv("SIM_DEBUG") != "" {
		env = append(env, "LOG_LEVEL=debug")
		t.Cleanup(func() {
			for i, r := range c.replicas {
				_ = os.WriteFile(fmt.Sprintf("/tmp/sim-replica-%d.log", i), []byte(r.Logs.String()), 0o644)
			}
		})
	}
	for range 2 {
		c.replicas = append(c.replicas, throttletest.Start(t, env...))
	}

	// A REST client's descriptor rules are limits too.
	key := c.replicas[0].RegisterDomain(t, "simrest", "simrest", "")
	req, _ := http.NewRequest(http.MethodPost, c.replicas[0].URL+"/rules", strings.NewReader(
		`{"name": "rest", "algorithm": "token_bucket", "limit": 100, "refill_rate": 50, "descriptors": [{"key": "scenario", "value": "rest"}]}`))
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /rules: %d", resp.StatusCode)
	}
	r := dialStream(t, c.replicas[0].GRPCAddr)
	rest := map[string]string{"scenario": "rest"}
	r.send("simrest", usage{bucket: rest, allowed: 1})
	if got := describe(r.actionFor(rest, 2*time.Second)); got != "token_bucket 1/1s max 2 ttl 2s" {
		t.Errorf("REST rule bucket: %s, want a newcomer's share of 50/s", got)
	}
	r.cancel()

	// Idle CPU, to tell the reports' cost from the servers' own.
	cpu0, _ := c.usage(t)
	time.Sleep(2 * time.Second)
	cpu1, _ := c.usage(t)
	idle := (cpu1 - cpu0) / 2 // per second, both replicas

	const d = 15 * time.Second
	for _, n := range []int{3, 10} {
		st, sh := steady(n), shifting(n, 7*time.Second, 11300*time.Millisecond) // two phases of the reassignment clock
		cpuA, repA := c.usage(t)
		c.run(t, d, nil, st, sh)
		cpuB, repB := c.usage(t)
		reports := repB - repA
		perReport := time.Duration(float64(cpuB-cpuA) / reports)
		net := time.Duration(max(float64(cpuB-cpuA)-d.Seconds()*float64(idle), 0) / reports)
		t.Logf("%d instances: %.0f reports in %v, servers' CPU %v: %v per report, about %v above their idle %v/s",
			n, reports, d, cpuB-cpuA, perReport.Round(time.Microsecond), net.Round(time.Microsecond), idle)
		for _, sc := range []*scenario{st, sh} {
			checkScenario(t, sc, d)
		}
	}

	// A replica stops: its instances reconnect to the other one and get
	// their assignments within one interval, and the limit holds.
	sc := steady(10)
	sc.name = "restart10" // a limit of its own: the instances above still hold theirs until they expire
	const restartAt, total = 5 * time.Second, 11 * time.Second
	c.run(t, total, func(elapsed time.Duration) {
		time.Sleep(restartAt - elapsed)
		for _, dp := range sc.planes {
			dp.setAddrs(c.replicas[1].GRPCAddr)
		}
		c.replicas[0].Stop(t, 5*time.Second)
	}, sc)
	ws := sc.windows(simWarmup, total)
	t.Logf("replica stop at %v: admitted/limit per window from %v: %s", restartAt, simWarmup, fmtWindows(ws))
	for i, w := range ws {
		if w > 1.10 {
			t.Errorf("replica stop: window %d admitted %.1f %% of the limit (> 110 %%)", i, 100*w)
		}
	}
	var moved int
	for i, dp := range sc.planes {
		gaps, first := dp.reconnects()
		if i%2 == 1 {
			continue // on the replica that stayed
		}
		if len(first) == 0 {
			t.Errorf("instance %d (replica 0) did not reconnect", i)
			continue
		}
		moved++
		t.Logf("instance %d reconnected %v after its stream closed; first assignment %v later", i, gaps[0].Round(time.Millisecond), first[0].Round(time.Millisecond))
		if first[0] < 0 || first[0] > simInterval {
			t.Errorf("instance %d: first assignment %v after reconnecting, want within one interval (%v)", i, first[0], simInterval)
		}
	}
	if moved != 5 {
		t.Errorf("%d instances moved, want 5", moved)
	}
}

// checkScenario asserts and logs one scenario's windows and rebalances.
func checkScenario(t *testing.T, sc *scenario, d time.Duration) {
	t.Helper()
	ws := sc.windows(0, d)
	var settled []float64
	for i, w := range ws {
		at := time.Duration(i) * time.Second
		if w > 1.10 {
			t.Errorf("%s: window %v-%v admitted %.1f %% of the limit (> 110 %%)", sc.name, at, at+time.Second, 100*w)
		}
		if at < simWarmup || sc.settling(at) {
			continue
		}
		settled = append(settled, w)
		if math.Abs(w-1) > 0.05 {
			t.Errorf("%s: window %v-%v admitted %.1f %% of the limit (settled: want 95-105 %%)", sc.name, at, at+time.Second, 100*w)
		}
	}
	var mean, lo, hi float64 = 0, math.Inf(1), math.Inf(-1)
	for _, w := range settled {
		mean += w / float64(len(settled))
		lo, hi = min(lo, w), max(hi, w)
	}
	t.Logf("%s: admitted/limit per window: %s; settled %d windows: mean %.1f %%, min %.1f %%, max %.1f %%",
		sc.name, fmtWindows(ws), len(settled), 100*mean, 100*lo, 100*hi)
	for k, s := range sc.shifts {
		until := d
		if k+1 < len(sc.shifts) {
			until = sc.shifts[k+1]
		}
		if os.Getenv("SIM_DEBUG") != "" {
			t.Logf("%s: run started at %s (epochs at multiples of %v)", sc.name, sc.rec.start.Format("05.000"), simInterval)
			for tt := s - 500*time.Millisecond; tt < min(until, s+2500*time.Millisecond); tt += 100 * time.Millisecond {
				var row []string
				for i := range sc.n {
					row = append(row, fmt.Sprintf("%4.0f/%4.0f", float64(sc.rec.sum(i, tt, tt+100*time.Millisecond))/0.1, sc.fair(i, tt)))
				}
				t.Logf("%s %v: %s", sc.name, tt, strings.Join(row, " "))
			}
		}
		r, rec := sc.rebalance(s, until), sc.recovered(s, until)
		t.Logf("%s: demand moved at %v: shares rebalanced in %v (%.2f intervals); admitted back within 5 %% of the limit and 10 %% of each fair share in %v (%.2f intervals)",
			sc.name, s, r.Round(time.Millisecond), r.Seconds()/simInterval.Seconds(), rec, rec.Seconds()/simInterval.Seconds())
		if r < 0 || r > 2*simInterval {
			t.Errorf("%s: rebalance after the move at %v took %v, want at most 2 intervals (%v)", sc.name, s, r, 2*simInterval)
			sc.logAssignments(t, s)
		}
	}
}

func fmtWindows(ws []float64) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%.1f", 100*w)
	}
	return strings.Join(parts, " ")
}
