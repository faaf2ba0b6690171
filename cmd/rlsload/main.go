// Command rlsload is the load generator of `make bench-rls`: it drives
// Throttle's Envoy rate-limit service (ShouldRateLimit, through the generated
// Envoy client) from many goroutines, bounded by a count and a time, and
// reports req/s, latency percentiles, the service's CPU per request (from
// /proc) and Redis's own CPU per decision (from INFO). It talks to loopback
// addresses only.
//
//	rlsload -print-config > descriptors/bench.yaml
//	rlsload -addr 127.0.0.1:8081 -case hot -algorithm token_bucket \
//	  -requests 20000 -duration 15s -pid $(pidof throttle) -redis redis://127.0.0.1:6379/0
//	rlsload -floor -redis redis://127.0.0.1:6379/0   # plain INCRBY+EXPIRE, the comparison point
//	rlsload -addr 127.0.0.1:8081 -tls-ca ca.crt -tls-cert client.crt -tls-key client.key   # over (m)TLS
//
// Each run prints one line for people and one RESULT line of key=value
// pairs for scripts (scripts/bench-rls.sh builds its table from them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

// options are the flags of one run.
type options struct {
	addr        string
	domain      string
	caseName    string
	algorithm   string
	cache       string // label only: whether the server's local cache is on
	concurrency int
	conns       int
	requests    int
	duration    time.Duration
	timeout     time.Duration
	warmup      int
	pid         int
	redisURL    string
	floor       bool
	runID       string
	// TLS to Throttle's gRPC port: the CA its certificate chains to, the
	// name it must carry, and a client certificate for mTLS; no CA: plaintext.
	tlsCA, tlsCert, tlsKey, tlsServerName string
}

var (
	cases          = []string{"distinct", "hot", "multi4"}
	algorithmNames = []string{"fixed_window", "sliding_window", "token_bucket", "gcra"}
)

func parseFlags(args []string, stderr io.Writer) (*options, bool, error) {
	fs := flag.NewFlagSet("rlsload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "Throttle's gRPC address, host:port (loopback only)")
	fs.StringVar(&o.domain, "domain", benchDomain, "rate-limit domain (its descriptors as -print-config writes them)")
	fs.StringVar(&o.caseName, "case", "distinct", "distinct (one unique descriptor per request), hot (one shared descriptor, limit 100/hour) or multi4 (4 unique descriptors per request)")
	fs.StringVar(&o.algorithm, "algorithm", "fixed_window", "fixed_window, sliding_window, token_bucket or gcra: which descriptor keys to send")
	fs.StringVar(&o.cache, "cache", "", "label for the report: whether the server's local over-limit cache is on (on, off)")
	fs.IntVar(&o.concurrency, "concurrency", 64, "concurrent calls (goroutines)")
	fs.IntVar(&o.conns, "conns", 2, "gRPC connections the calls are spread over (Envoy opens about one per worker thread)")
	fs.IntVar(&o.requests, "requests", 20000, "stop after this many calls (0 = no count bound)")
	fs.DurationVar(&o.duration, "duration", 15*time.Second, "stop after this long (0 = no time bound); whichever bound comes first")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "deadline of every call")
	fs.IntVar(&o.warmup, "warmup", 500, "calls before the measurement (other descriptor values, not counted)")
	fs.IntVar(&o.pid, "pid", 0, "the throttle process: its CPU per request is read from /proc/PID/stat (0 = not measured)")
	fs.StringVar(&o.redisURL, "redis", "", "redis:// URL of Throttle's Redis: its CPU per decision from INFO cpu and commandstats (empty = not measured)")
	fs.BoolVar(&o.floor, "floor", false, "measure the comparison point instead: pipelined INCRBY+EXPIRE on distinct keys, straight to -redis")
	fs.StringVar(&o.runID, "run", "", "run id, part of every descriptor value so that runs never share counters (default: from the clock)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA bundle Throttle's gRPC certificate chains to: the calls go over TLS (empty = plaintext)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM client certificate for mTLS (with -tls-key and -tls-ca)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&o.tlsServerName, "tls-server-name", "localhost", "the name Throttle's certificate must carry")
	printConfig := fs.Bool("print-config", false, "print the descriptor YAML the cases expect (domain "+benchDomain+") and exit")
	if err := fs.Parse(args); err != nil {
		return nil, false, err
	}
	if fs.NArg() > 0 {
		return nil, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *printConfig {
		return o, true, nil
	}
	if o.runID == "" {
		o.runID = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return o, false, o.validate()
}

func (o *options) validate() error {
	var errs []error
	if !o.floor {
		if !slices.Contains(cases, o.caseName) {
			errs = append(errs, fmt.Errorf("-case %q is not one of %v", o.caseName, cases))
		}
		if !slices.Contains(algorithmNames, o.algorithm) {
			errs = append(errs, fmt.Errorf("-algorithm %q is not one of %v", o.algorithm, algorithmNames))
		}
		if err := requireLoopback(o.addr); err != nil {
			errs = append(errs, fmt.Errorf("-addr: %w", err))
		}
		if o.conns < 1 {
			errs = append(errs, fmt.Errorf("-conns %d: at least 1", o.conns))
		}
	} else if o.redisURL == "" {
		errs = append(errs, errors.New("-floor needs -redis"))
	}
	if o.redisURL != "" {
		if err := requireLoopbackRedis(o.redisURL); err != nil {
			errs = append(errs, fmt.Errorf("-redis: %w", err))
		}
	}
	if o.concurrency < 1 {
		errs = append(errs, fmt.Errorf("-concurrency %d: at least 1", o.concurrency))
	}
	if o.requests < 0 || o.warmup < 0 || o.duration < 0 {
		errs = append(errs, errors.New("-requests, -warmup and -duration must not be negative"))
	}
	if o.requests == 0 && o.duration == 0 {
		errs = append(errs, errors.New("give -requests or -duration (or both): a run must be bounded"))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %s: must be positive", o.timeout))
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("-tls-cert and -tls-key go together"))
	}
	if o.tlsCert != "" && o.tlsCA == "" {
		errs = append(errs, errors.New("-tls-cert needs -tls-ca (the calls go over TLS only with it)"))
	}
	if o.pid < 0 {
		errs = append(errs, fmt.Errorf("-pid %d: not a process id", o.pid))
	}
	return errors.Join(errs...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, printConfig, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if printConfig {
		_, err := io.WriteString(stdout, benchDescriptors)
		return err
	}
	var res *result
	if o.floor {
		res, err = runFloor(ctx, o)
	} else {
		res, err = runRLS(ctx, o)
	}
	if err != nil {
		return err
	}
	res.print(stdout)
	return nil
}
