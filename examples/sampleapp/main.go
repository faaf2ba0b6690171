// Command sampleapp is the app the Envoy and Kubernetes demos put behind Envoy:
// a tiny HTTP server that says hello. It knows nothing about rate limiting;
// Envoy asks Throttle before each request reaches it.
//
//	PORT=8080 go run ./examples/sampleapp
//
// GET / answers "hello" (naming the x-user-id header when present), GET /healthz
// answers "ok".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sampleapp:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	port := getenv("PORT")
	if port == "" {
		port = "8080"
	}
	log := slog.New(slog.NewJSONHandler(stdout, nil))
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(), ReadHeaderTimeout: 5 * time.Second}
	log.Info("listening", "addr", ln.Addr().String())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func newHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if u := r.Header.Get("X-User-Id"); u != "" {
			fmt.Fprintf(w, "hello, %s\n", u)
			return
		}
		io.WriteString(w, "hello\n")
	})
	return mux
}
