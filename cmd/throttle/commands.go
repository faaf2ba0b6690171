package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/store"
)

// Usage lines of the commands without flags of their own.
const (
	migrateUsage = "usage: throttle migrate up|down|version (database from DATABASE_URL, default sqlite://throttle.db)"
	configUsage  = "usage: throttle config check FILE|DIR… (a DIR is checked as DESCRIPTORS_DIR would load it)"
)

// serveConfig reads serve's settings as parseServe does, with its help on
// --help; a bad flag or argument is the error and how to get the help, not
// the whole help (some 80 lines) after it.
func serveConfig(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	var out bytes.Buffer // the flag package's complaint and the help, if any
	cfg, err := parseServe(args, getenv, &out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = out.WriteTo(stderr)
	case err != nil && (out.Len() > 0 || strings.HasPrefix(err.Error(), "unexpected argument")):
		return nil, fmt.Errorf("serve: %w\nrun 'throttle help serve' to list every setting", err)
	}
	return cfg, err
}

// help runs `throttle help [COMMAND]`: the commands, or one command's help
// as `throttle COMMAND --help` prints it.
func help(args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	switch args[0] {
	case "serve":
		_, err := parseServe([]string{"--help"}, getenv, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	case "migrate":
		fmt.Fprintln(stdout, migrateUsage)
	case "config":
		fmt.Fprintln(stdout, configUsage)
	case "version", "help":
		fmt.Fprint(stdout, usage)
	default:
		return fmt.Errorf("no help for %q: it is not a command (throttle help lists them)", args[0])
	}
	return nil
}

// isHelp reports whether args ask for a command's help.
func isHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")
}

// migrate runs `throttle migrate up|down|version` on DATABASE_URL.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if isHelp(args) {
		fmt.Fprintln(stdout, migrateUsage)
		return nil
	}
	if len(args) != 1 || (args[0] != "up" && args[0] != "down" && args[0] != "version") {
		return errors.New(migrateUsage)
	}
	url := getenv("DATABASE_URL")
	if url == "" {
		url = "sqlite://throttle.db"
	}
	v, dirty, err := store.Migrate(ctx, url, args[0])
	if err != nil {
		return scrub(err, urlSecrets(url)) // store.Migrate's errors say "migrate …" already
	}
	state := ""
	if dirty {
		state = " (dirty: a migration failed half-way; fix it by hand)"
	}
	fmt.Fprintf(stdout, "database schema version %d%s\n", v, state)
	return nil
}

// configCmd runs `throttle config check FILE|DIR…`: a directory is read as
// DESCRIPTORS_DIR is (its *.yaml and *.yml files, by the same loader).
func configCmd(args []string, getenv func(string) string, stdout io.Writer) error {
	if isHelp(args) || (len(args) == 2 && args[0] == "check" && isHelp(args[1:])) {
		fmt.Fprintln(stdout, configUsage)
		return nil
	}
	if len(args) < 2 || args[0] != "check" {
		return errors.New(configUsage)
	}
	merge, _ := strconv.ParseBool(getenv("MERGE_DOMAIN_CONFIG"))
	// scope: global is checked against the server the files are for: one
	// with GLOBAL_REDIS_URL (cfg.GlobalScope) keeps it.
	opts := descriptors.Options{MergeDomains: merge, GlobalScope: getenv("GLOBAL_REDIS_URL") != ""}
	if v := getenv("MAX_RESERVATION_TTL"); v != "" {
		ttl, err := parseDuration(v)
		if err != nil {
			return fmt.Errorf("MAX_RESERVATION_TTL: %w", err)
		}
		opts.MaxReservationTTL = ttl
	}
	n, err := descriptors.Check(opts, args[1:]...)
	if err != nil {
		return fmt.Errorf("invalid descriptor configuration:\n%w", err)
	}
	if n == 0 {
		return fmt.Errorf("no descriptor files (*.yaml, *.yml) in %s", strings.Join(args[1:], " "))
	}
	fmt.Fprintf(stdout, "%d file(s) OK\n", n)
	return nil
}
