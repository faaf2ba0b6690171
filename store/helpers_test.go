package store

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
	"github.com/throttle-rl/throttle/migrations"
)

// latestMigration is the version of the last embedded migration.
func latestMigration(t *testing.T) uint {
	t.Helper()
	ups, err := fs.Glob(migrations.SQLite(), "*.up.sql")
	if err != nil || len(ups) == 0 {
		t.Fatalf("embedded migrations: %v, %d", err, len(ups))
	}
	return uint(len(ups))
}

// eachDialect runs fn as a subtest on a fresh SQLite file and on a fresh
// PostgreSQL database; url is the database's URL (nothing opened yet).
func eachDialect(t *testing.T, fn func(t *testing.T, url string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, sqliteURL(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, pgtest.FreshDatabase(t, "throttle"))
	})
}

func sqliteURL(t *testing.T) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "throttle.db")
}

// mustOpen opens url and closes it when the test ends.
func mustOpen(t *testing.T, url string) *DB {
	t.Helper()
	db, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// keyHash is the hash of a made-up API key.
func keyHash(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// mustCreateClient registers a client called name with an email derived from it.
func mustCreateClient(t *testing.T, db *DB, name string) Client {
	t.Helper()
	email := strings.ToLower(strings.ReplaceAll(name, " ", "")) + "@example.com"
	c, err := db.CreateClient(t.Context(), Client{Name: name, Email: email}, keyHash("key-"+name))
	if err != nil {
		t.Fatalf("CreateClient(%q): %v", name, err)
	}
	return c
}

// wantErr fails unless err wraps want and its message mentions every word.
func wantErr(t *testing.T, err, want error, words ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err = %q, want it to mention %q", err, w)
		}
	}
}

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
