// Command throttle is rate limiting as a service: the Envoy rate-limit gRPC
// API and a REST API over one engine, with counters in Redis or in memory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

const usage = `Usage: throttle <command> [arguments]

Commands:
  serve                     run the REST API and the Envoy rate-limit service (see throttle serve --help)
  migrate up|down|version   apply, roll back one, or show database migrations (DATABASE_URL)
  config check FILE|DIR…    validate Envoy descriptor YAML files (a DIR as DESCRIPTORS_DIR loads it)
  version                   print the version
  help [COMMAND]            show this help, or a command's (throttle help serve lists every setting)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args, reference := commandLine(os.Args[0], os.Args[1:])
	getenv := os.Getenv
	if reference {
		getenv = referenceDefaults(getenv)
	}
	err := run(ctx, args, getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "throttle:", err)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(1)
	}
}

// referenceName is the name of the reference service's binary
// (/bin/ratelimit in its image): Throttle's image links it to throttle, so
// a deployment of the reference that runs it starts Throttle unchanged.
const referenceName = "ratelimit"

// commandLine is the command run for args, the program invoked as argv0:
// args themselves, except that under the reference service's name, with no
// command (no arguments, or only flags), it is `serve`, as the reference
// serves with no arguments, and reference says so.
func commandLine(argv0 string, args []string) (cmd []string, reference bool) {
	if filepath.Base(argv0) != referenceName || (len(args) > 0 && !strings.HasPrefix(args[0], "-")) {
		return args, false
	}
	return append([]string{"serve"}, args...), true
}

// referenceDefaults is getenv with the defaults of a server started as the
// reference service, for the variables it does not give:
//   - DATABASE_URL sqlite://:memory:. The reference has no database, and
//     its deployments give Throttle no place to write one (Envoy Gateway's
//     pod has a read-only root filesystem): REST clients, rules and
//     exemptions then last as long as the process; give DATABASE_URL to
//     keep them.
//   - JSON_ON_REST_PORT true: the reference serves POST /json on its port,
//     and its users' Lua filters call it; a Throttle started as itself
//     serves it only when told to (rest.go).
func referenceDefaults(getenv func(string) string) func(string) string {
	defaults := map[string]string{"DATABASE_URL": "sqlite://:memory:", "JSON_ON_REST_PORT": "true"}
	return func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return defaults[name]
	}
}

// run is the whole program, testable: it returns instead of exiting.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		cfg, err := serveConfig(rest, getenv, stderr)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, stderr)
	case "migrate":
		return migrate(ctx, rest, getenv, stdout)
	case "config":
		return configCmd(rest, getenv, stdout)
	case "version", "--version":
		fmt.Fprintln(stdout, "throttle", version)
		return nil
	case "help", "--help", "-h":
		return help(rest, getenv, stdout)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
