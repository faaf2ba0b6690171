package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

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
		fn(t, postgresURL(t))
	})
}

func sqliteURL(t *testing.T) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "throttle.db")
}

// postgresURL creates a database of its own for the test, through the server
// at THROTTLE_TEST_DATABASE_URL, and drops it when the test ends.
func postgresURL(t *testing.T) string {
	t.Helper()
	admin := os.Getenv("THROTTLE_TEST_DATABASE_URL")
	if admin == "" {
		t.Fatal("THROTTLE_TEST_DATABASE_URL is empty: run via scripts/with-test-services.sh (make test)")
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse THROTTLE_TEST_DATABASE_URL: %v", err)
	}
	name := "throttle_" + randomHex(t, 8)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to test PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("connect to drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
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
