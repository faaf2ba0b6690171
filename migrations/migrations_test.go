package migrations

import (
	"database/sql"
	"errors"
	"io/fs"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit/pgtest"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

var fileName = regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.(up|down)\.sql$`)

// versions lists the migration versions in f, checking that every file is
// named NNNN_title.up.sql or .down.sql, is not empty, and has its pair.
func versions(t *testing.T, f fs.FS) []string {
	t.Helper()
	entries, err := fs.ReadDir(f, ".")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]bool{}
	var order []string
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("%s: want NNNN_title.up.sql or NNNN_title.down.sql", e.Name())
			continue
		}
		b, err := fs.ReadFile(f, e.Name())
		if err != nil || len(b) == 0 {
			t.Errorf("%s: empty or unreadable (%v)", e.Name(), err)
		}
		if seen[m[1]] == nil {
			seen[m[1]] = map[string]bool{}
			order = append(order, m[1])
		}
		seen[m[1]][m[2]] = true
	}
	for v, dirs := range seen {
		if !dirs["up"] || !dirs["down"] {
			t.Errorf("version %s: want both up and down files, have %v", v, dirs)
		}
	}
	return order
}

func TestFilesPairUpAcrossDialects(t *testing.T) {
	pg := versions(t, Postgres())
	lite := versions(t, SQLite())
	if len(pg) == 0 {
		t.Fatal("no migrations embedded")
	}
	if diff := cmp.Diff(pg, lite); diff != "" {
		t.Errorf("versions differ between postgres and sqlite (-postgres +sqlite):\n%s", diff)
	}
	for _, dir := range []string{"postgres", "sqlite"} {
		if _, err := fs.Stat(FS(), dir); err != nil {
			t.Errorf("FS() lacks %s: %v", dir, err)
		}
	}
}

// upDownUp applies every migration, reverts them all, and applies them again.
func upDownUp(t *testing.T, source fs.FS, name string, driver database.Driver) {
	t.Helper()
	src, err := iofs.New(source, ".")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, name, driver)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, step := range []func() error{m.Up, m.Down, m.Up} {
		if err := step(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	v, dirty, err := m.Version()
	if err != nil || dirty || v == 0 {
		t.Errorf("version after up, down, up = %d, dirty %v, %v", v, dirty, err)
	}
}

func TestSQLiteUpDownUp(t *testing.T) {
	// Foreign keys off, as store.Migrate connects: migration 0007 copies
	// the clients table, and refuses to run with them on.
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db")+"?_pragma=foreign_keys(0)")
	if err != nil {
		t.Fatal(err)
	}
	driver, err := sqlitemigrate.WithInstance(db, &sqlitemigrate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	upDownUp(t, SQLite(), "sqlite", driver)
}

func TestPostgresUpDownUp(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgtest.FreshDatabase(t, "throttle_m"))
	if err != nil {
		t.Fatal(err)
	}
	driver, err := pgxmigrate.WithInstance(stdlib.OpenDB(*cfg), &pgxmigrate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	upDownUp(t, Postgres(), "postgres", driver)
}
