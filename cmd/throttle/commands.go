package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/store"
)

// migrate runs `throttle migrate up|down|version` on DATABASE_URL.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 1 || (args[0] != "up" && args[0] != "down" && args[0] != "version") {
		return errors.New("usage: throttle migrate up|down|version (database from DATABASE_URL, default sqlite://throttle.db)")
	}
	url := getenv("DATABASE_URL")
	if url == "" {
		url = "sqlite://throttle.db"
	}
	v, dirty, err := store.Migrate(ctx, url, args[0])
	if err != nil {
		return err // store.Migrate's errors say "migrate …" already
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
	if len(args) < 2 || args[0] != "check" {
		return errors.New("usage: throttle config check FILE|DIR… (a DIR is checked as DESCRIPTORS_DIR would load it)")
	}
	merge, _ := strconv.ParseBool(getenv("MERGE_DOMAIN_CONFIG"))
	n, err := descriptors.Check(descriptors.Options{MergeDomains: merge}, args[1:]...)
	if err != nil {
		return fmt.Errorf("invalid descriptor configuration:\n%w", err)
	}
	if n == 0 {
		return fmt.Errorf("no descriptor files (*.yaml, *.yml) in %s", strings.Join(args[1:], " "))
	}
	fmt.Fprintf(stdout, "%d file(s) OK\n", n)
	return nil
}
