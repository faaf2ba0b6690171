package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The band of approximate limits through the built binary: replicas
// started together right before the traffic, calls split 1 : 3 : 5 over
// them, a limit of 1,000 per 10 s window (band, band_sliding in
// approxDescriptors; a REST rule alike), offered at a fixed rate until a
// second before the window ends, or as fast as the replicas answer for
// max(2 s, six sync intervals). The window admits the limit within 1 %,
// never more than the blind budgets (limit / 128) past it, and once the
// replicas are stopped (SIGTERM: their leases go back) Redis counts exactly
// what they admitted. TestApproximateBand runs a few cells in CI;
// TestApproximateBandMatrix, with THROTTLE_APPROX_BAND=1, the whole
// matrix of docs/algorithms.md.

const (
	bandLimit  = 1000
	bandWindow = 10 * time.Second
)

// bandCell is one measurement of the band.
type bandCell struct {
	rate     int // calls a second in all; 0: as fast as the replicas answer
	replicas int
	sliding  bool
	cluster  bool
	interval time.Duration
	rest     bool // through a REST rule (/check), not Envoy's gRPC API
}

func (c bandCell) String() string {
	rate, alg, redis, api := "max", "fixed", "redis", "grpc"
	if c.rate > 0 {
		rate = fmt.Sprintf("%d/s", c.rate)
	}
	if c.sliding {
		alg = "sliding"
	}
	if c.cluster {
		redis = "cluster"
	}
	if c.rest {
		api = "rest"
	}
	return fmt.Sprintf("%s %dx %s %s %s %s", rate, c.replicas, alg, redis, c.interval, api)
}

// bandRedis is a Redis for the cells: a single one or a 3-master Cluster,
// its URL and a client of each master.
type bandRedis struct {
	url     string
	masters []redis.UniversalClient
}

func startBandRedis(t *testing.T, cluster bool) bandRedis {
	t.Helper()
	if !cluster {
		srv := redistest.Start(t)
		return bandRedis{srv.URL(), []redis.UniversalClient{redistest.NewClient(t, srv.URL())}}
	}
	servers := redistest.StartClusterOf(t, 3)
	b := bandRedis{url: clusterURL(servers)}
	for _, m := range servers {
		b.masters = append(b.masters, redistest.NewClient(t, m.URL()))
	}
	return b
}

// measureBand runs cell number n on r and returns what the window
// admitted, what Redis counts of it once the replicas stopped, and the
// rate offered (calls a second).
func measureBand(t *testing.T, r bandRedis, cell bandCell, n int) (admitted, inRedis int64, offered float64) {
	t.Helper()
	prefix := fmt.Sprintf("band%d_", n) // its own registry and counters
	env := []string{"REDIS_URL=" + r.url, "CACHE_KEY_PREFIX=" + prefix, "APPROXIMATE_SYNC_INTERVAL=" + cell.interval.String()}
	servers, callers := bandReplicas(t, cell, env)
	// The offer starts with a window, and ends a second before it does.
	start := time.Now().Truncate(bandWindow).Add(bandWindow)
	end := start.Add(bandWindow - time.Second)
	if cell.rate == 0 {
		end = start.Add(max(2*time.Second, 6*cell.interval))
	}
	time.Sleep(time.Until(start))
	got, calls := offerTo(t, callers, []int{1, 3, 5}, float64(cell.rate), end)
	offered = float64(calls) / time.Since(start).Seconds()
	for _, a := range got {
		admitted += a
	}
	for _, s := range servers {
		s.Stop(t, 10*time.Second)
	}
	return admitted, prefixCount(t, r.masters, prefix, start.UnixMicro()/bandWindow.Microseconds()), offered
}

// bandReplicas starts the cell's replicas with env and returns them and a
// caller of the cell's limit through each.
func bandReplicas(t *testing.T, cell bandCell, env []string) ([]*throttletest.Server, []caller) {
	t.Helper()
	if !cell.rest {
		key := "band"
		if cell.sliding {
			key = "band_sliding"
		}
		servers, clients := approxReplicas(t, strings.TrimPrefix(env[0], "REDIS_URL="), cell.replicas, env[1:]...)
		return servers, grpcCallers(clients, key, "v")
	}
	// A rule made on the first replica, which the others load at start.
	env = append(env, "DATABASE_URL="+pgtest.FreshDatabase(t, "throttle_band"))
	first := throttletest.Start(t, env...)
	key := first.Register(t, "band")
	alg := "fixed_window"
	if cell.sliding {
		alg = "sliding_window"
	}
	rule := fmt.Sprintf(`{"name":"band","algorithm":%q,"limit":%d,"window":%d,"accuracy":"approximate"}`, alg, bandLimit, int(bandWindow.Seconds()))
	if code, _, got := doJSON(t, "POST", first.URL+"/rules", key, rule); code != 201 {
		t.Fatalf("POST /rules = %d %v", code, got)
	}
	servers := []*throttletest.Server{first}
	for len(servers) < cell.replicas {
		servers = append(servers, throttletest.Start(t, env...))
	}
	var callers []caller
	for _, s := range servers {
		callers = append(callers, restCaller(s.URL, key))
	}
	return servers, callers
}

// assertBand checks one cell's figures.
func assertBand(t *testing.T, cell bandCell, admitted, inRedis int64, offered float64) {
	t.Helper()
	t.Logf("%s (%.0f calls/s offered): admitted %d of %d (%+.1f %%), Redis counts %d", cell, offered, admitted, bandLimit, float64(admitted-bandLimit)*100/bandLimit, inRedis)
	if low, high := int64(bandLimit*99/100), int64(bandLimit+bandLimit/128); admitted < low || admitted > high {
		t.Errorf("%s: admitted %d, want %d..%d (1 %% under, the blind budgets over)", cell, admitted, low, high)
	}
	if inRedis != admitted {
		t.Errorf("%s: Redis counts %d, the replicas admitted %d", cell, inRedis, admitted)
	}
}

// TestApproximateBand: the band's hardest cells, as fast as the replicas
// answer: 3 and 8 replicas, fixed and sliding windows, one Redis and a
// Cluster, 100 ms and 500 ms intervals, and a REST rule; and 2,000 calls
// a second on 8 replicas at 500 ms.
func TestApproximateBand(t *testing.T) {
	single, cluster := startBandRedis(t, false), startBandRedis(t, true)
	cells := []struct {
		bandCell
		r bandRedis
	}{
		{bandCell{replicas: 3, interval: 100 * time.Millisecond}, single},
		{bandCell{replicas: 8, sliding: true, interval: 500 * time.Millisecond}, single},
		{bandCell{replicas: 3, cluster: true, interval: 100 * time.Millisecond}, cluster},
		{bandCell{rate: 2000, replicas: 8, interval: 500 * time.Millisecond}, single},
		{bandCell{replicas: 3, rest: true, interval: 100 * time.Millisecond}, single},
	}
	for i, c := range cells {
		admitted, inRedis, offered := measureBand(t, c.r, c.bandCell, i)
		assertBand(t, c.bandCell, admitted, inRedis, offered)
	}
}

// TestApproximateBandMatrix measures the whole band (THROTTLE_APPROX_BAND=1;
// it takes about 16 minutes): rates 200/s, 2,000/s and as fast as the
// replicas answer × 1, 3 and 8 replicas × fixed and sliding windows × one
// Redis and a 3-master Cluster × 100 ms and 500 ms intervals, and the REST
// rule at each rate and interval on 3 replicas; it prints the table of
// docs/algorithms.md.
func TestApproximateBandMatrix(t *testing.T) {
	if os.Getenv("THROTTLE_APPROX_BAND") == "" {
		t.Skip("THROTTLE_APPROX_BAND=1 measures the whole band (about 16 minutes)")
	}
	redises := map[bool]bandRedis{false: startBandRedis(t, false), true: startBandRedis(t, true)}
	var cells []bandCell
	for _, rate := range []int{200, 2000, 0} {
		for _, interval := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond} {
			for _, cluster := range []bool{false, true} {
				for _, sliding := range []bool{false, true} {
					for _, n := range []int{1, 3, 8} {
						cells = append(cells, bandCell{rate: rate, replicas: n, sliding: sliding, cluster: cluster, interval: interval})
					}
				}
			}
			cells = append(cells, bandCell{rate: rate, replicas: 3, interval: interval, rest: true})
		}
	}
	results := make(map[bandCell]string)
	for i, c := range cells {
		admitted, inRedis, offered := measureBand(t, redises[c.cluster], c, i)
		assertBand(t, c, admitted, inRedis, offered)
		results[c] = fmt.Sprint(admitted)
		if c.rate == 0 {
			results[c] += fmt.Sprintf(" (%.0f/s)", offered)
		}
	}
	t.Log("\n" + bandTable(cells, results))
}

// bandTable is the matrix's table: a row per rate, interval, window and
// Redis (and the REST rule's), a column per replica count, each cell what
// the window admitted of the limit (as fast as the replicas answer: at
// what rate they did).
func bandTable(cells []bandCell, results map[bandCell]string) string {
	lines := []string{"| offered | interval | window | Redis, API | 1 replica | 3 replicas | 8 replicas |", "| --- | --- | --- | --- | --- | --- | --- |"}
	done := make(map[bandCell]bool)
	for _, c := range cells {
		row := c
		row.replicas = 0
		if done[row] {
			continue
		}
		done[row] = true
		f := strings.Fields(c.String())
		line := fmt.Sprintf("| %s | %s | %s | %s, %s |", f[0], f[4], f[2], f[3], f[5])
		for _, n := range []int{1, 3, 8} {
			c.replicas = n
			if r, ok := results[c]; ok {
				line += " " + r + " |"
			} else {
				line += " – |"
			}
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// caller makes one call and reports whether it was admitted.
type caller func() (bool, error)

// grpcCallers are callers of key=value through each client.
func grpcCallers(clients []rlsv3.RateLimitServiceClient, key, value string) []caller {
	var out []caller
	for _, c := range clients {
		out = append(out, func() (bool, error) { return approxCall(c, key, value) })
	}
	return out
}

// offerTo sends calls through the callers until end, split by weights
// (weights[i % len(weights)] for caller i): rate calls a second in all,
// or, with rate 0, as fast as they answer (4 × weight goroutines on each).
// It returns how many each caller got admitted, and how many calls were
// made in all.
func offerTo(t *testing.T, callers []caller, weights []int, rate float64, end time.Time) ([]int64, int64) {
	t.Helper()
	total := 0
	for i := range callers {
		total += weights[i%len(weights)]
	}
	admitted := make([]atomic.Int64, len(callers))
	var calls atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	run := func(i int, paced bool) {
		defer wg.Done()
		perSecond := rate * float64(weights[i%len(weights)]) / float64(total)
		const tick = 10 * time.Millisecond
		owed := 0.0
		// A paced offer that lags (a busy machine) stops at end all the
		// same: past it the next window begins, and would admit anew.
		for next := time.Now(); next.Before(end) && time.Now().Before(end); next = next.Add(tick) {
			if paced {
				time.Sleep(time.Until(next))
				owed += perSecond * tick.Seconds()
			} else {
				owed, next = 1, time.Now()
			}
			for ; owed >= 1 && time.Now().Before(end); owed-- {
				calls.Add(1)
				ok, err := callers[i]()
				if err != nil {
					failed.Store(err)
					return
				}
				if ok {
					admitted[i].Add(1)
				}
			}
		}
	}
	for i := range callers {
		n := 1
		if rate == 0 {
			n = 4 * weights[i%len(weights)]
		}
		for range n {
			wg.Add(1)
			go run(i, rate > 0)
		}
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatal(err)
	}
	out := make([]int64, len(callers))
	for i := range admitted {
		out[i] = admitted[i].Load()
	}
	return out, calls.Load()
}

// restCaller is a caller of the band rule on identifier "v" through the
// REST API at url, with API key key.
func restCaller(url, key string) caller {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := []byte(`{"identifier":"v","rule":"band"}`)
	return func() (bool, error) {
		req, err := http.NewRequest("POST", url+"/check", bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var got struct {
			Allowed *bool `json:"allowed"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Allowed == nil {
			return false, fmt.Errorf("POST /check: status %d, %v", resp.StatusCode, err)
		}
		return *got.Allowed, nil
	}
}
