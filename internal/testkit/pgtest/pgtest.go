// Package pgtest gives tests a PostgreSQL database of their own on the
// throw-away server that scripts/with-test-services.sh starts.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// FreshDatabase creates an empty database, named prefix_<random>, on the
// server at THROTTLE_TEST_DATABASE_URL, drops it when the test ends, and
// returns its URL. It fails the test when there is no test server.
func FreshDatabase(t testing.TB, prefix string) string {
	t.Helper()
	admin := os.Getenv("THROTTLE_TEST_DATABASE_URL")
	if admin == "" {
		t.Fatal("THROTTLE_TEST_DATABASE_URL is empty: run via scripts/with-test-services.sh (make test)")
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse THROTTLE_TEST_DATABASE_URL: %v", err)
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := prefix + "_" + hex.EncodeToString(b)
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
