package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is one measured run.
type result struct {
	caseName, alg, cache string
	perCall              int // decisions (descriptors) per call
	concurrency          int
	conns                int    // gRPC connections (0: none, the floor)
	tls                  string // off, tls or mtls ("": the floor)
	t                    *tally
	serviceCPU           time.Duration
	hasServiceCPU        bool
	redis                *redisDelta // nil when not measured
}

func (r *result) decisions() int { return r.t.calls * r.perCall }

// perUnit returns total µs per n as text, "-" when n is 0.
func perUnit(total time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(total)/float64(time.Microsecond)/float64(n), 'f', 2, 64)
}

func usecPer(usec int64, n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(usec)/float64(n), 'f', 2, 64)
}

func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

// fields are the RESULT line's key=value pairs, in order; "-" where nothing
// was measured.
func (r *result) fields() [][2]string {
	t := r.t
	cache := r.cache
	if cache == "" {
		cache = "-"
	}
	rps := "-"
	if t.elapsed > 0 {
		rps = strconv.FormatFloat(float64(t.calls)/t.elapsed.Seconds(), 'f', 0, 64)
	}
	cpu := "-"
	if r.hasServiceCPU {
		cpu = perUnit(r.serviceCPU, t.calls)
	}
	redisCPU, calls, perCall, perDecision, cmds := "-", "-", "-", "-", "-"
	if d := r.redis; d != nil {
		redisCPU = perUnit(d.cpu, r.decisions())
		calls = strconv.FormatInt(d.calls, 10)
		perCall = usecPer(d.usec, d.calls)
		perDecision = usecPer(d.usec, int64(r.decisions()))
		cmds = strings.Join(d.commands, "+")
	}
	codes := "-"
	if len(t.errors) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(t.errors)) {
			parts = append(parts, c+":"+strconv.Itoa(t.errors[c]))
		}
		codes = strings.Join(parts, ",")
	}
	return [][2]string{
		{"case", r.caseName}, {"alg", r.alg}, {"cache", cache}, {"concurrency", strconv.Itoa(r.concurrency)},
		{"calls", strconv.Itoa(t.calls)}, {"decisions", strconv.Itoa(r.decisions())},
		{"seconds", strconv.FormatFloat(t.elapsed.Seconds(), 'f', 3, 64)}, {"rps", rps},
		{"p50_us", micros(t.quantile(0.5))}, {"p99_us", micros(t.quantile(0.99))},
		{"p999_us", micros(t.quantile(0.999))}, {"max_us", micros(t.quantile(1))},
		{"cpu_us_per_req", cpu},
		{"redis_us_per_decision", redisCPU},
		{"engine_cmds", cmds}, {"engine_calls", calls},
		{"engine_usec_per_call", perCall}, {"engine_us_per_decision", perDecision},
		{"ok", strconv.Itoa(t.ok)}, {"over", strconv.Itoa(t.over)},
		{"errors", strconv.Itoa(t.errorCount())}, {"error_codes", codes},
		{"conns", strconv.Itoa(r.conns)}, {"tls", orDash(r.tls)},
	}
}

// print writes the human line, one line per error code with its first
// message, and the RESULT line.
func (r *result) print(w io.Writer) {
	t := r.t
	f := map[string]string{}
	var kv []string
	for _, p := range r.fields() {
		f[p[0]] = p[1]
		kv = append(kv, p[0]+"="+p[1])
	}
	fmt.Fprintf(w, "%s/%s cache=%s: %d calls (%d decisions) in %.2fs = %s req/s; p50 %v p99 %v p99.9 %v max %v; OK %d, OVER_LIMIT %d, errors %d",
		r.caseName, r.alg, f["cache"], t.calls, r.decisions(), t.elapsed.Seconds(), f["rps"],
		t.quantile(0.5).Round(time.Microsecond), t.quantile(0.99).Round(time.Microsecond),
		t.quantile(0.999).Round(time.Microsecond), t.quantile(1).Round(time.Microsecond),
		t.ok, t.over, t.errorCount())
	if r.hasServiceCPU {
		fmt.Fprintf(w, "; service CPU %s µs/req", f["cpu_us_per_req"])
	}
	if r.redis != nil {
		fmt.Fprintf(w, "; Redis CPU %s µs/decision, %s %s calls at %s µs (%s µs/decision)",
			f["redis_us_per_decision"], f["engine_cmds"], f["engine_calls"], f["engine_usec_per_call"], f["engine_us_per_decision"])
	}
	fmt.Fprintln(w)
	for _, c := range slices.Sorted(maps.Keys(t.errors)) {
		fmt.Fprintf(w, "  error %s ×%d, first: %s\n", c, t.errors[c], t.firstErr[c])
	}
	fmt.Fprintln(w, "RESULT "+strings.Join(kv, " "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
