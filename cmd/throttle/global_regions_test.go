package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
	"github.com/throttle-rl/throttle/internal/wanproxy"
)

// Global limits across regions, through the built binary: three regions
// (a, b, c) of two replicas each, each region with its own Redis
// (REDIS_URL), and one global Redis (GLOBAL_REDIS_URL) that each region
// reaches through a proxy of its own that delays every chunk 50 ms ±
// 10 ms each way (150 ms for c). Callers split 1 : 3 : 5 over the regions.
// Measured: the band (what a window admits of a global limit, and the
// global Redis counts exactly that), a region cut off (it spends its
// leases, then FAILURE_MODE decides, marked degraded; healed, its pending
// hits arrive once) and how long a denial takes to travel to the other
// regions. TestGlobalRegions runs a few cells in CI (about 40 s);
// TestGlobalRegionsMatrix, with THROTTLE_GLOBAL_REGIONS=1, all of them.

const globalDescriptors = `domain: global
descriptors:
  - key: hour
    rate_limit: {unit: hour, requests_per_unit: 10000, scope: global}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 1000, scope: global}
`

// globalLimits are the limits of globalDescriptors by key.
var globalLimits = map[string]struct {
	limit  int64
	window time.Duration
}{"hour": {10000, time.Hour}, "minute": {1000, time.Minute}}

// regionWeights split the callers over regions a, b, c.
var regionWeights = []int{1, 3, 5}

// regionsNet is what the regions' replicas run against: the global Redis,
// and per region a Redis and a delaying proxy to the global one.
type regionsNet struct {
	global    *redistest.Server
	globalRDB *redis.Client
	regions   []*regionNet
}

type regionNet struct {
	name  string
	redis *redistest.Server
	rdb   *redis.Client
	proxy *wanproxy.Proxy
}

// startRegionsNet starts the Redis servers and the proxies (c's the
// farthest: 150 ms each way, or THROTTLE_GLOBAL_FAR_DELAY), all stopped
// when the test ends.
func startRegionsNet(t *testing.T) *regionsNet {
	t.Helper()
	n := &regionsNet{global: redistest.Start(t)}
	n.globalRDB = redistest.NewClient(t, n.global.URL())
	far := 150 * time.Millisecond
	if v := os.Getenv("THROTTLE_GLOBAL_FAR_DELAY"); v != "" { // to compare, or to find where c fails
		var err error
		if far, err = time.ParseDuration(v); err != nil {
			t.Fatalf("THROTTLE_GLOBAL_FAR_DELAY=%q: %v", v, err)
		}
	}
	for i, name := range []string{"a", "b", "c"} {
		delay := 50 * time.Millisecond
		if i == 2 {
			delay = far
		}
		p, err := wanproxy.New(n.global.Addr(), wanproxy.Options{Delay: delay, Jitter: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		r := &regionNet{name: name, redis: redistest.Start(t), proxy: p}
		r.rdb = redistest.NewClient(t, r.redis.URL())
		n.regions = append(n.regions, r)
	}
	return n
}

// deployment is two replicas in each region, with a key prefix of their
// own (their own registry and counters).
type deployment struct {
	net     *regionsNet
	prefix  string
	servers [][]*throttletest.Server // by region
	clients [][]rlsv3.RateLimitServiceClient
}

// deploy starts the replicas of every region on n with FAILURE_MODE mode
// and keys starting with prefix.
func deploy(t *testing.T, n *regionsNet, prefix, mode string) *deployment {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "global.yaml"), []byte(globalDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &deployment{net: n, prefix: prefix}
	for _, r := range n.regions {
		env := []string{"REDIS_URL=" + r.redis.URL(), "GLOBAL_REDIS_URL=redis://" + r.proxy.Addr() + "/0", "REGION=" + r.name,
			"DESCRIPTORS_DIR=" + dir, "CACHE_KEY_PREFIX=" + prefix, "APPROXIMATE_SYNC_INTERVAL=100ms", "FAILURE_MODE=" + mode,
			"RESPONSE_DYNAMIC_METADATA=true"}
		var servers []*throttletest.Server
		var clients []rlsv3.RateLimitServiceClient
		for range 2 {
			s := throttletest.Start(t, env...)
			conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			servers, clients = append(servers, s), append(clients, rlsv3.NewRateLimitServiceClient(conn))
		}
		d.servers, d.clients = append(d.servers, servers), append(d.clients, clients)
	}
	d.awaitRegistry(t)
	return d
}

// awaitRegistry waits up to 10 s for every replica to have read the global
// Redis's registry of replicas (throttle_global_replicas above 0), as a
// rollout gives it: before that a replica decides global limits exactly,
// on the global Redis, and an exact call that times out is refused by
// policy and may still land (counted, not admitted).
func (d *deployment) awaitRegistry(t *testing.T) {
	t.Helper()
	for _, servers := range d.servers {
		for _, s := range servers {
			for deadline := time.Now().Add(10 * time.Second); s.Metric(t, "throttle_global_replicas") == 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: no answer from the global Redis's registry within 10 s", s.URL)
				}
			}
		}
	}
}

// stop stops every replica with SIGTERM: their leases go back and their
// pending hits are sent (through the proxies: heal them first).
func (d *deployment) stop(t *testing.T) {
	t.Helper()
	for _, servers := range d.servers {
		for _, s := range servers {
			s.Stop(t, 15*time.Second)
		}
	}
}

// globalOutcome is what one call got.
type globalOutcome int

const (
	withinLease   globalOutcome = iota // OK, decided within a lease (or blind budget)
	overLimit                          // OVER_LIMIT from a count the global Redis answered
	policyAdmit                        // OK by FAILURE_MODE (degraded)
	policyRefusal                      // OVER_LIMIT by FAILURE_MODE (degraded)
	numOutcomes
)

// globalCall asks c for one hit of value on each of keys (one descriptor
// each) in the global domain.
func globalCall(c rlsv3.RateLimitServiceClient, value string, keys ...string) (globalOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "global"}
	for _, k := range keys {
		req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k, Value: value}}})
	}
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		return 0, err
	}
	ok := resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
	switch degraded := resp.GetDynamicMetadata().GetFields()["degraded"].GetBoolValue(); {
	case ok && !degraded:
		return withinLease, nil
	case !ok && !degraded:
		return overLimit, nil
	case ok:
		return policyAdmit, nil
	default:
		return policyRefusal, nil
	}
}

// regionTally counts outcomes by region and phase (before a cut, during it,
// after the heal), and when each region and replica first got refused.
type regionTally struct {
	phase     atomic.Int32
	n         [3][3][numOutcomes]atomic.Int64
	calls     atomic.Int64
	lastAdmit atomic.Int64       // Unix ns of the last call admitted within a lease
	refusedAt [3][2]atomic.Int64 // Unix ns of each replica's first refusal
}

func (y *regionTally) note(region, replica int, o globalOutcome) {
	y.calls.Add(1)
	y.n[region][y.phase.Load()][o].Add(1)
	now := time.Now().UnixNano()
	switch o {
	case withinLease:
		y.lastAdmit.Store(now)
	case overLimit:
		y.refusedAt[region][replica].CompareAndSwap(0, now)
	}
}

// get sums globalOutcome o of region (-1: every region) over phases (none: all).
func (y *regionTally) get(region int, o globalOutcome, phases ...int) int64 {
	if len(phases) == 0 {
		phases = []int{0, 1, 2}
	}
	var sum int64
	for r := range 3 {
		if region >= 0 && r != region {
			continue
		}
		for _, p := range phases {
			sum += y.n[r][p][o].Load()
		}
	}
	return sum
}

// regionOffer is traffic on value of keys through every replica of d, split
// 1 : 3 : 5 over the regions (evenly over a region's replicas): rate calls
// a second in all, or with rate 0 as fast as they answer (8 × weight
// goroutines a replica). It runs until stop is closed.
type regionOffer struct {
	d     *deployment
	value string
	keys  []string
	rate  float64
	y     *regionTally
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	err   error
}

func startRegionOffer(d *deployment, y *regionTally, rate float64, value string, keys ...string) *regionOffer {
	o := &regionOffer{d: d, value: value, keys: keys, rate: rate, y: y, stop: make(chan struct{})}
	total := 0
	for _, w := range regionWeights {
		total += 2 * w
	}
	for r, clients := range d.clients {
		for i, c := range clients {
			n, perSecond := 1, rate*float64(regionWeights[r])/float64(total)
			if rate == 0 {
				n = 8 * regionWeights[r]
			}
			for range n {
				o.wg.Add(1)
				go o.run(r, i, c, perSecond)
			}
		}
	}
	return o
}

func (o *regionOffer) run(region, replica int, c rlsv3.RateLimitServiceClient, perSecond float64) {
	defer o.wg.Done()
	const tick = 10 * time.Millisecond
	owed := 0.0
	for next := time.Now(); ; next = next.Add(tick) {
		if o.rate > 0 {
			select {
			case <-o.stop:
				return
			case <-time.After(time.Until(next)):
			}
			owed += perSecond * tick.Seconds()
		} else {
			owed = 1
		}
		for ; owed >= 1; owed-- {
			select {
			case <-o.stop:
				return
			default:
			}
			got, err := globalCall(c, o.value, o.keys...)
			if err != nil {
				o.mu.Lock()
				o.err = err
				o.mu.Unlock()
				return
			}
			o.y.note(region, replica, got)
		}
	}
}

// end stops the offer, waits for its calls, and fails the test if one
// failed.
func (o *regionOffer) end(t *testing.T) {
	t.Helper()
	close(o.stop)
	o.wg.Wait()
	if o.err != nil {
		t.Fatalf("ShouldRateLimit: %v", o.err)
	}
}

// untilQuiet waits until nothing was admitted within a lease for quiet
// (every region refuses: the budget is spent, leases given back and taken)
// or until deadline; it reports whether it got quiet.
func untilQuiet(y *regionTally, quiet time.Duration, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		last := time.Unix(0, y.lastAdmit.Load())
		if y.lastAdmit.Load() != 0 && time.Since(last) > quiet {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// windowStart is the start of the window of key that a cell needing need
// can run in whole: the current one if it has need left, else the next
// (slept until). A cell never starts within windowSkew of a window's
// start: the replicas decide on Redis's clock as they estimate it (the
// midpoint of a sync's round trip, off by up to half of it, more on a
// starved CPU), and a hit decided in the window before by that estimate
// is counted there.
func windowStart(key string, need time.Duration) time.Time {
	w := globalLimits[key].window
	start := time.Now().Truncate(w)
	if time.Until(start.Add(w)) < need {
		start = start.Add(w)
	}
	time.Sleep(time.Until(start.Add(windowSkew)))
	return start
}

// windowSkew is how far into a window a cell starts at the earliest.
const windowSkew = 2 * time.Second

// globalCount is what rdb counts as admitted in value's window num of
// key, under the deployment's prefix, once every replica stopped: its
// counters, less the leases left in their hashes (":l"). Those are leases
// no replica holds any more — granted by a call whose answer never reached
// its replica (cut off), they go back at the next call of the window — and
// it returns them apart.
func (d *deployment) globalCount(t *testing.T, rdb *redis.Client, key, value string, num int64) (count, leftLeases int64) {
	t.Helper()
	ctx := context.Background()
	pattern := counterPattern(d.prefix, key, value, num)
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		n, err := rdb.Get(ctx, k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		count += n
	}
	for _, v := range d.leases(t, rdb, pattern+":l") {
		amount, _, _ := strings.Cut(v, ":")
		n, err := strconv.ParseInt(amount, 10, 64)
		if err != nil {
			t.Fatalf("lease %q: %v", v, err)
		}
		leftLeases += n
	}
	return count - leftLeases, leftLeases
}

// counterPattern matches the global Redis keys of the counters of window
// num of key=value (its Envoy counter "<len>:<key><len>:<value>", escaped,
// ends the hash tag).
func counterPattern(prefix, key, value string, num int64) string {
	return prefix + "throttle:{*" + key + "*" + value + "}:*:" + strconv.FormatInt(num, 10)
}

// windowNum is the number of the window of key that holds at.
func windowNum(key string, at time.Time) int64 {
	return at.UnixMicro() / globalLimits[key].window.Microseconds()
}

// regionBand is one band cell's figures.
type regionBand struct {
	byRegion [3]int64 // admitted within a lease
	admitted int64
	degraded int64
	offered  float64   // calls a second
	start    time.Time // when the offer began (in each key's window)
}

// runRegionBand offers value of keys at rate until every region has refused for
// 2 s (or max), and returns what was admitted.
func runRegionBand(t *testing.T, d *deployment, rate float64, value string, keys []string, max time.Duration) regionBand {
	t.Helper()
	windowStart(keys[len(keys)-1], max+10*time.Second) // the shortest window last
	start := time.Now()
	y := &regionTally{}
	o := startRegionOffer(d, y, rate, value, keys...)
	if !untilQuiet(y, 2*time.Second, time.Now().Add(max)) {
		t.Errorf("%s at %.0f/s: still admitting after %s", value, rate, max)
	}
	o.end(t)
	took := time.Since(start)
	for _, k := range keys {
		if windowNum(k, time.Now()) != windowNum(k, start) {
			t.Errorf("%s: the cell crossed the end of %s's window", value, k)
		}
	}
	res := regionBand{start: start}
	for r := range 3 {
		res.byRegion[r] = y.get(r, withinLease)
	}
	res.admitted = y.get(-1, withinLease)
	res.degraded = y.get(-1, policyAdmit) + y.get(-1, policyRefusal)
	res.offered = float64(y.calls.Load()) / took.Seconds()
	t.Logf("%s: offer ended after %v", value, took.Round(time.Millisecond))
	return res
}

// checkRegionBand checks a band cell once the replicas stopped: within 1 % of
// limit (the shortest of keys'), none degraded, and the global Redis
// counts of each key what was admitted, the regional ones nothing.
func checkRegionBand(t *testing.T, d *deployment, name, value string, keys []string, res regionBand) {
	t.Helper()
	limit := globalLimits[keys[len(keys)-1]].limit
	t.Logf("%s: admitted %d of %d (%+.2f %%) — a %d, b %d, c %d; %.0f calls/s offered, %d degraded",
		name, res.admitted, limit, float64(res.admitted-limit)*100/float64(limit), res.byRegion[0], res.byRegion[1], res.byRegion[2], res.offered, res.degraded)
	if low, high := limit*99/100, limit*101/100; res.admitted < low || res.admitted > high {
		t.Errorf("%s: admitted %d, want %d..%d (±1 %%)", name, res.admitted, low, high)
	}
	if res.degraded != 0 {
		t.Errorf("%s: %d decisions degraded with every region reaching the global Redis, want 0", name, res.degraded)
	}
	for _, k := range keys {
		num := windowNum(k, res.start)
		if got, left := d.globalCount(t, d.net.globalRDB, k, value, num); got != res.admitted || left != 0 {
			t.Errorf("%s: the global Redis counts %d of %s (and %d leased to no one), the regions admitted %d", name, got, k, left, res.admitted)
		}
		for _, r := range d.net.regions {
			if got, _ := d.globalCount(t, r.rdb, k, value, num); got != 0 {
				t.Errorf("%s: region %s's Redis counts %d of the global limit %s, want 0", name, r.name, got, k)
			}
		}
	}
}

// regionCell is one cell of the band: a rate (0: as fast as the replicas
// answer) on keys (one descriptor each, in one request).
type regionCell struct {
	rate float64
	keys []string
}

func (c regionCell) String() string {
	rate := "max"
	if c.rate > 0 {
		rate = fmt.Sprintf("%.0f/s", c.rate)
	}
	return rate + " " + strings.Join(c.keys, "+")
}

// runRegionCells runs cells one after another on d, checking each once
// its replicas, idle, gave their leases back (a minute's counters expire
// soon after it: they are read at once); it returns each cell's result
// line.
func runRegionCells(t *testing.T, d *deployment, cells []regionCell) []string {
	t.Helper()
	var lines []string
	for i, c := range cells {
		value := fmt.Sprintf("band%02dx", i)
		limit := globalLimits[c.keys[len(c.keys)-1]].limit
		max := 30 * time.Second
		if c.rate > 0 {
			max = time.Duration(1.5*float64(limit)/c.rate*float64(time.Second)) + 10*time.Second
		}
		res := runRegionBand(t, d, c.rate, value, c.keys, max)
		d.leasesBack(t, value, c.keys, res.start)
		checkRegionBand(t, d, c.String(), value, c.keys, res)
		lines = append(lines, fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %.0f |", c, res.admitted, res.byRegion[0], res.byRegion[1], res.byRegion[2], res.degraded, res.offered))
	}
	return lines
}

// leasesBack waits up to 10 s for the global Redis to hold no lease of
// value's windows of keys (idle replicas give theirs back within two
// intervals and a round trip).
func (d *deployment) leasesBack(t *testing.T, value string, keys []string, start time.Time) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		held := 0
		for _, k := range keys {
			held += len(d.leases(t, d.net.globalRDB, counterPattern(d.prefix, k, value, windowNum(k, start))+":l"))
		}
		if held == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("%s: %d leases still held 10 s after the offer", value, held)
			return
		}
	}
}

// cutResult is what a cut-off run measured.
type cutResult struct {
	mode                 string
	cLease               int64    // c's leases in the global Redis at the cut
	cWithin              int64    // c's calls admitted within a lease during the cut
	cDegraded            [2]int64 // c's degraded admissions, refusals during the cut
	abAdmitted, admitted int64
	counted, leftLeases  int64
}

// runCut offers 2,000 calls a second of the hour limit on value; 1.5 s in,
// c's proxy is cut for 10 s; after the heal the offer goes on until every
// region has refused for 2 s. Then the replicas stop, and the global
// Redis's count is checked against what was admitted within leases.
func runCut(t *testing.T, d *deployment, mode, value string) cutResult {
	t.Helper()
	start := windowStart("hour", 2*time.Minute)
	num := windowNum("hour", start)
	c := d.net.regions[2]
	y := &regionTally{}
	o := startRegionOffer(d, y, 2000, value, "hour")
	time.Sleep(1500 * time.Millisecond)
	c.proxy.Cut()
	y.phase.Store(1)
	// c's leases: those of the hash that a and b do not renew meanwhile.
	leaseKey := counterPattern(d.prefix, "hour", value, num) + ":l"
	first := d.leases(t, d.net.globalRDB, leaseKey)
	time.Sleep(300 * time.Millisecond)
	second := d.leases(t, d.net.globalRDB, leaseKey)
	var cLease int64
	for field, v := range first {
		if second[field] == v {
			amount, _, _ := strings.Cut(v, ":")
			n, _ := strconv.ParseInt(amount, 10, 64)
			cLease += n
		}
	}
	time.Sleep(9700 * time.Millisecond)
	y.phase.Store(2)
	c.proxy.Heal()
	if !untilQuiet(y, 2*time.Second, time.Now().Add(30*time.Second)) {
		t.Errorf("%s: still admitting 30 s after the heal", mode)
	}
	o.end(t)
	degraded := 0.0
	for _, s := range d.servers[2] {
		degraded += s.Metric(t, "throttle_degraded_decisions_total") // only global limits here
	}
	d.stop(t)
	counted, left := d.globalCount(t, d.net.globalRDB, "hour", value, num)
	res := cutResult{mode: mode, counted: counted, leftLeases: left, cLease: cLease, cWithin: y.get(2, withinLease, 1),
		cDegraded:  [2]int64{y.get(2, policyAdmit, 1), y.get(2, policyRefusal, 1)},
		abAdmitted: y.get(0, withinLease) + y.get(1, withinLease), admitted: y.get(-1, withinLease)}
	t.Logf("FAILURE_MODE=%s, c cut 10 s: c held %d leased at the cut and admitted %d within them, then %d admitted and %d refused by the policy (degraded); a %d, b %d, c %d admitted within leases in all (%d, %+.2f %%); the global Redis counts %d (and %d leased to no one); c's replicas counted %v degraded",
		mode, res.cLease, res.cWithin, res.cDegraded[0], res.cDegraded[1], y.get(0, withinLease), y.get(1, withinLease), y.get(2, withinLease), res.admitted,
		float64(res.admitted-10000)/100, res.counted, res.leftLeases, degraded)

	for r := range 2 {
		if n := y.get(r, policyAdmit) + y.get(r, policyRefusal); n != 0 {
			t.Errorf("%s: region %s had %d decisions degraded, want 0 (it reaches the global Redis)", mode, d.net.regions[r].name, n)
		}
	}
	// A window c never had an answer for has a blind budget instead.
	if blind := 2 * (10000 / (128 * 6)); res.cWithin > res.cLease+int64(blind) {
		t.Errorf("%s: c admitted %d within leases while cut off, more than the %d it held and its blind budgets (%d)", mode, res.cWithin, res.cLease, blind)
	}
	if res.cDegraded[0]+res.cDegraded[1] == 0 {
		t.Errorf("%s: c cut off for 10 s never decided by the policy", mode)
	}
	switch mode {
	case "open":
		if res.cDegraded[1] != 0 {
			t.Errorf("open: c refused %d by the policy", res.cDegraded[1])
		}
	case "closed":
		if res.cDegraded[0] != 0 {
			t.Errorf("closed: c admitted %d by the policy", res.cDegraded[0])
		}
	}
	if n := y.get(2, overLimit, 1); n != 0 {
		t.Errorf("%s: c refused %d calls as over the limit while cut off (no answer said the budget was spent), want 0", mode, n)
	}
	if got := int64(degraded); got != y.get(2, policyAdmit)+y.get(2, policyRefusal) {
		t.Errorf("%s: c's throttle_degraded_decisions_total = %d, its callers got %d degraded", mode, got, y.get(2, policyAdmit)+y.get(2, policyRefusal))
	}
	// The band: what the leases admitted, within 1 %, and over it by at
	// most what c spent of its leases after its last report (counted at
	// the heal, after the global Redis gave them back).
	if low, high := int64(9900), 10100+res.cLease; res.admitted < low || res.admitted > high {
		t.Errorf("%s: %d admitted within leases, want %d..%d (−1 %%, +1 %% and c's leases at the cut)", mode, res.admitted, low, high)
	}
	// A sync in flight at the cut may have reached the global Redis with
	// its answer lost: its hits go back to pending and are sent again at
	// the heal, with the replica's running total, and counted once.
	if res.counted != res.admitted {
		t.Errorf("%s: the global Redis counts %d, the regions admitted %d within leases (%+d)", mode, res.counted, res.admitted, res.counted-res.admitted)
	}
	return res
}

// leases reads rdb's lease hashes matching pattern: field →
// "lease:expiry" (not the replicas' running totals, "r:<id>" and "b:<id>").
func (d *deployment) leases(t *testing.T, rdb *redis.Client, pattern string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, k := range keys {
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range h {
			if !strings.HasPrefix(f, "r:") && !strings.HasPrefix(f, "b:") {
				out[k+" "+f] = v
			}
		}
	}
	return out
}

// travelResult is how long a denial took to reach each region.
type travelResult struct {
	first [3]time.Duration // a's first refusal after the offer began; b's, c's after a's
	all   [3]time.Duration // until every replica of the region refused (after a's first)
}

// runTravel spends the hour limit of value through region a as fast as its
// replicas answer, while b's and c's replicas each ask once every 10 ms,
// and measures how long after a's first refusal b and c refuse.
func runTravel(t *testing.T, d *deployment, value string) travelResult {
	t.Helper()
	windowStart("hour", time.Minute)
	y := &regionTally{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	call := func(r, i int, pace time.Duration) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			o, err := globalCall(d.clients[r][i], value, "hour")
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
				return
			}
			y.note(r, i, o)
			if pace > 0 {
				select {
				case <-stop:
					return
				case <-time.After(pace):
				}
			}
		}
	}
	began := time.Now()
	for i := range 2 {
		for range 16 {
			wg.Add(1)
			go call(0, i, 0)
		}
		for r := 1; r < 3; r++ {
			wg.Add(1)
			go call(r, i, 10*time.Millisecond)
		}
	}
	allRefused := func() bool {
		for r := range 3 {
			for i := range 2 {
				if y.refusedAt[r][i].Load() == 0 {
					return false
				}
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !allRefused() && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	close(stop)
	wg.Wait()
	if failed != nil {
		t.Fatalf("ShouldRateLimit: %v", failed)
	}
	if !allRefused() {
		for r, servers := range d.servers {
			t.Logf("region %s: %s", d.net.regions[r].name, globalMetrics(t, servers[0]))
		}
		t.Errorf("denial travel: not every replica refused within 30 s: admitted a %d, b %d, c %d; refused a %d, b %d, c %d; degraded %d; first refusals %v",
			y.get(0, withinLease), y.get(1, withinLease), y.get(2, withinLease), y.get(0, overLimit), y.get(1, overLimit), y.get(2, overLimit),
			y.get(-1, policyAdmit)+y.get(-1, policyRefusal), &y.refusedAt)
		return travelResult{}
	}
	at := func(r, i int) time.Time { return time.Unix(0, y.refusedAt[r][i].Load()) }
	aFirst := at(0, 0)
	if at(0, 1).Before(aFirst) {
		aFirst = at(0, 1)
	}
	var res travelResult
	res.first[0] = aFirst.Sub(began)
	for r := range 3 {
		first, last := at(r, 0), at(r, 1)
		if last.Before(first) {
			first, last = last, first
		}
		if r > 0 {
			res.first[r] = first.Sub(aFirst)
		}
		res.all[r] = last.Sub(aFirst)
	}
	t.Logf("denial travel (%s): a spent the hour's 10,000 in %v (%d admitted by a, %d by b, %d by c); after a's first refusal: a's other replica %v; b refused %v later (both replicas %v), c %v (both %v)",
		value, res.first[0].Round(time.Millisecond), y.get(0, withinLease), y.get(1, withinLease), y.get(2, withinLease),
		res.all[0].Round(time.Millisecond), res.first[1].Round(time.Millisecond), res.all[1].Round(time.Millisecond),
		res.first[2].Round(time.Millisecond), res.all[2].Round(time.Millisecond))
	if n := y.get(-1, policyAdmit) + y.get(-1, policyRefusal); n != 0 {
		t.Errorf("denial travel: %d decisions degraded, want 0", n)
	}
	return res
}

// TestGlobalRegions: the regions' representative cells, in CI: the hour
// limit offered as fast as the replicas answer (the band), a denial
// spent through region a (how long b and c take to refuse: logged), and
// region c cut off for 10 s under FAILURE_MODE=closed.
func TestGlobalRegions(t *testing.T) {
	n := startRegionsNet(t)
	d := deploy(t, n, "gr_", "closed")
	// The band and the denial on one deployment, stopped before the
	// counts are read.
	band := runRegionBand(t, d, 0, "band", []string{"hour"}, 30*time.Second)
	runTravel(t, d, "travel")
	d.stop(t)
	checkRegionBand(t, d, "max hour", "band", []string{"hour"}, band)

	runCut(t, deploy(t, n, "grc_", "closed"), "closed", "cut")
}

// TestGlobalRegionsMatrix measures every cell (THROTTLE_GLOBAL_REGIONS=1;
// about 6 minutes): the band at 200/s, 2,000/s and as fast as the
// replicas answer on each limit and on both in one request; region c cut
// off under FAILURE_MODE open, closed and local; and the denial's travel,
// three times. It prints the tables of docs/global-limits.md.
func TestGlobalRegionsMatrix(t *testing.T) {
	if os.Getenv("THROTTLE_GLOBAL_REGIONS") == "" {
		t.Skip("THROTTLE_GLOBAL_REGIONS=1 measures every cell (about 6 minutes)")
	}
	n := startRegionsNet(t)
	var cells []regionCell
	for _, keys := range [][]string{{"minute"}, {"hour"}, {"hour", "minute"}} {
		for _, rate := range []float64{200, 2000, 0} {
			cells = append(cells, regionCell{rate, keys})
		}
	}
	bandDeployment := deploy(t, n, "grm_", "open")
	band := runRegionCells(t, bandDeployment, cells)
	bandDeployment.stop(t)
	t.Log("\n| offered | admitted within leases | a | b | c | degraded | calls/s |\n| --- | --- | --- | --- | --- | --- | --- |\n" + strings.Join(band, "\n"))

	var cut []string
	for _, mode := range []string{"open", "closed", "local"} {
		r := runCut(t, deploy(t, n, "grm"+mode+"_", mode), mode, "cut")
		cut = append(cut, fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %d | %d |", mode, r.cLease, r.cWithin, r.cDegraded[0], r.cDegraded[1], r.abAdmitted, r.admitted, r.counted))
	}
	t.Log("\n| FAILURE_MODE | c's leases at the cut | c within them | c admitted by policy | c refused by policy | a + b admitted | admitted within leases | global Redis counts |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n" + strings.Join(cut, "\n"))

	var travel []string
	d := deploy(t, n, "grt_", "open")
	for i := range 3 {
		r := runTravel(t, d, fmt.Sprintf("travel%d", i))
		travel = append(travel, fmt.Sprintf("| %v | %v | %v | %v | %v |", r.first[0].Round(time.Millisecond),
			r.first[1].Round(time.Millisecond), r.all[1].Round(time.Millisecond), r.first[2].Round(time.Millisecond), r.all[2].Round(time.Millisecond)))
	}
	d.stop(t)
	t.Log("\n| a spent the limit in | b's first refusal after a's | b's both | c's first | c's both |\n| --- | --- | --- | --- | --- |\n" + strings.Join(travel, "\n"))
}

// globalMetrics is s's throttle_global_* and degraded metrics, for a
// failure's message.
func globalMetrics(t *testing.T, s *throttletest.Server) string {
	t.Helper()
	resp, err := s.HTTP.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if (strings.HasPrefix(line, "throttle_global_") && !strings.Contains(line, "_bucket")) || strings.HasPrefix(line, "throttle_degraded") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
