// Command rlsclient calls Throttle's Envoy rate-limit service the way Envoy
// does: ShouldRateLimit with a domain and descriptors, printing each reply.
// It is the grpcurl of this repository, built from the generated Envoy stubs.
//
//	go run ./examples/rlsclient -addr localhost:8081 -domain edge \
//	  -d generic_key=api,user_id=alice -n 12
//
// Each -d is one descriptor: comma-separated key=value entries, in order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type descriptorFlags []*rlcommon.RateLimitDescriptor

func (d *descriptorFlags) String() string { return fmt.Sprint(len(*d), " descriptors") }

func (d *descriptorFlags) Set(v string) error {
	desc := &rlcommon.RateLimitDescriptor{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("entry %q is not key=value", kv)
		}
		desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: val})
	}
	*d = append(*d, desc)
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "rlsclient:", err)
			os.Exit(1)
		}
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlsclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "localhost:8081", "Throttle's gRPC address (GRPC_PORT)")
	domain := fs.String("domain", "edge", "rate-limit domain")
	n := fs.Int("n", 1, "how many calls to make")
	hits := fs.Uint("hits", 0, "hits_addend of the request (0 = 1)")
	var descs descriptorFlags
	fs.Var(&descs, "d", "a descriptor: key=value[,key=value…] (repeat for several)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(descs) == 0 {
		return errors.New("give at least one -d key=value")
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	for i := 1; i <= *n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: descs, HitsAddend: uint32(*hits)})
		cancel()
		if err != nil {
			return fmt.Errorf("call %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "%d %s", i, resp.GetOverallCode())
		for _, st := range resp.GetStatuses() {
			if l := st.GetCurrentLimit(); l != nil {
				fmt.Fprintf(stdout, " [%s %d/%s remaining=%d reset=%s]", st.GetCode(), l.GetRequestsPerUnit(), l.GetUnit(), st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
			} else {
				fmt.Fprintf(stdout, " [%s no limit]", st.GetCode())
			}
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
