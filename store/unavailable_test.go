package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
)

// lockSQLite takes the write lock of the SQLite file at path from a
// connection of its own (as another process would), until the test ends.
func lockSQLite(t *testing.T, path string) {
	t.Helper()
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	other.SetMaxOpenConns(1)
	tx, err := other.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE revision SET value = value WHERE id = 1`); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback()
		other.Close()
	})
}

// TestUnavailableSQLiteLocked: while another connection holds SQLite's
// write lock, a write waits up to the DB's timeout and fails with
// ErrUnavailable (wrapping the driver's error), counted by operation; reads
// go on (WAL), and so do writes once the lock is gone.
func TestUnavailableSQLiteLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "throttle.db")
	db := mustOpen(t, "sqlite://"+path)
	reg := prometheus.NewRegistry()
	if err := db.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	c := mustCreateClient(t, db, "Locked App")
	db.timeout = 300 * time.Millisecond

	lockSQLite(t, path)
	rule := Rule{ClientID: c.ID, Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}}
	_, err := db.CreateRule(t.Context(), rule)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("CreateRule while locked: %v, want ErrUnavailable", err)
	}
	if got := unavailableCounts(t, reg); got["create_rule"] != 1 {
		t.Errorf("throttle_store_unavailable_total = %v, want create_rule 1", got)
	}
	if rules, err := db.Rules(t.Context(), c.ID); err != nil || len(rules) != 0 {
		t.Errorf("Rules while locked = %v, %v; want none, no error", rules, err)
	}
	if err := db.DeleteExemption(t.Context(), c.ID, "nobody"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("DeleteExemption while locked: %v, want ErrUnavailable", err)
	}
	want := map[string]float64{"create_rule": 1, "delete_exemption": 1}
	if got := unavailableCounts(t, reg); len(got) != len(want) || got["create_rule"] != 1 || got["delete_exemption"] != 1 {
		t.Errorf("throttle_store_unavailable_total = %v, want %v", got, want)
	}
}

// unavailableCounts reads throttle_store_unavailable_total by op.
func unavailableCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "throttle_store_unavailable_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

// TestUnreachableSQLiteBusy: SQLite's own busy error, without a deadline
// to stop the wait first, is ErrUnavailable too.
func TestUnreachableSQLiteBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "throttle.db")
	mustOpen(t, "sqlite://"+path)
	lockSQLite(t, path)
	second, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_, err = second.BeginTx(t.Context(), nil)
	if err == nil || !unreachable(err) {
		t.Errorf("BEGIN IMMEDIATE on a locked file: %v, want an unreachable error", err)
	}
	if _, err := second.Exec(`SELECT nosuchcolumn FROM revision`); err == nil || unreachable(err) {
		t.Errorf("a bad query: %v, want an error that is not unreachable", err)
	}
}

// TestUnavailablePostgres: a PostgreSQL that refuses connections, one that
// was stopped under an open pool, and one that came back.
func TestUnavailablePostgres(t *testing.T) {
	ctx := t.Context()
	// Nothing listens there: Open's ping is refused.
	_, err := Open(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable", nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open on a closed port: %v, want ErrUnavailable", err)
	}

	srv := pgtest.StartServer(t)
	db := mustOpen(t, srv.URL)
	c := mustCreateClient(t, db, "Outage App")
	srv.Stop(t)
	for _, op := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"Rules", func(ctx context.Context) error { _, err := db.Rules(ctx, c.ID); return err }},
		{"CreateExemption", func(ctx context.Context) error {
			_, err := db.CreateExemption(ctx, Exemption{ClientID: c.ID, Identifier: "x"})
			return err
		}},
		{"Snapshot", func(ctx context.Context) error { _, err := db.Snapshot(ctx); return err }},
		{"Usage", func(ctx context.Context) error { _, err := db.Usage(ctx, c.ID); return err }},
		{"Ping", db.Ping},
	} {
		err := op.do(ctx)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s with PostgreSQL stopped: %v, want ErrUnavailable", op.name, err)
		}
		t.Logf("%s: %v", op.name, err)
	}
	if _, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "bad name!", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}}); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnavailable) {
		t.Errorf("an invalid rule with PostgreSQL stopped: %v, want ErrInvalid (checked first)", err)
	}

	srv.Start(t)
	var rules []Rule
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if rules, err = db.Rules(ctx, c.ID); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(rules) != 0 {
		t.Fatalf("Rules after PostgreSQL came back: %v, %v", rules, err)
	}
	if _, err := db.CreateExemption(ctx, Exemption{ClientID: c.ID, Identifier: "x"}); err != nil {
		t.Errorf("CreateExemption after PostgreSQL came back: %v", err)
	}
}
