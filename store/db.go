package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Dialect names returned by (*DB).Dialect.
const (
	DialectSQLite   = "sqlite"
	DialectPostgres = "postgres"
)

// DB is Throttle's database: SQLite or PostgreSQL behind database/sql. Every
// query is written once, with '?' placeholders, and rewritten for PostgreSQL
// by (*DB).q; that is the only place the dialects differ at query time.
type DB struct {
	sql     *sql.DB
	dialect string
	log     *slog.Logger
	now     func() time.Time
	// timeout bounds each operation: Timeout (tests shorten it).
	timeout time.Duration
	// unavailable counts the operations that failed with ErrUnavailable,
	// by operation; RegisterMetrics registers it.
	unavailable *prometheus.CounterVec
	// quotas cap each client's rows (SetQuotas); zero: none.
	quotas Quotas
}

// Open connects to databaseURL and applies pending migrations.
//
// databaseURL is "sqlite://PATH", "sqlite:PATH", "postgres://…" or
// "postgresql://…". SQLite runs in WAL mode with foreign keys on and a busy
// timeout, through a single connection (SQLite has one writer anyway).
// "sqlite://:memory:" is a database in this process's memory, its own
// (not another Open's), which lives as long as the DB: every client, rule
// and exemption is lost when the process ends (a server started as the
// reference service, which has none, takes it by default).
func Open(ctx context.Context, databaseURL string, log *slog.Logger) (*DB, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dialect, target, err := parseURL(databaseURL)
	if err != nil {
		return nil, err
	}
	if target == memoryPath {
		target = memoryPrefix + strconv.FormatUint(memoryDatabases.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	sqlDB, err := openSQL(dialect, target, true)
	if err != nil {
		return nil, err
	}
	db := &DB{sql: sqlDB, dialect: dialect, log: log, now: time.Now, timeout: Timeout, unavailable: newUnavailableCounter(dialect)}
	if err := db.Ping(ctx); err != nil {
		sqlDB.Close()
		return nil, err
	}
	version, _, err := migrateTarget(ctx, dialect, target, "up")
	if err != nil {
		sqlDB.Close()
		return nil, err
	}
	log.Debug("database ready", "dialect", dialect, "schema_version", version)
	return db, nil
}

// memoryPath is the path of "sqlite://:memory:"; Open names each such
// database memoryPrefix and a number of its own (memoryDatabases).
const (
	memoryPath   = ":memory:"
	memoryPrefix = "\x00memory-"
)

var memoryDatabases atomic.Uint64

// openSQL opens (without connecting) the database/sql handle of target, in
// dialect (as parseURL returns them). foreignKeys switches SQLite's
// foreign keys on: the migrator's connection has them off, so that a
// migration may copy a table others refer to (0007) without cascading
// deletes.
func openSQL(dialect, target string, foreignKeys bool) (*sql.DB, error) {
	switch dialect {
	case DialectSQLite:
		db, err := sql.Open("sqlite", sqliteDSN(target, foreignKeys))
		if err != nil {
			return nil, fmt.Errorf("open sqlite database: %w", err)
		}
		// One connection, never closed: an in-memory database lives as
		// long as a connection to it.
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		return db, nil
	default:
		cfg, err := pgx.ParseConfig(target)
		if err != nil {
			// pgx's message may echo the URL, password included.
			return nil, fmt.Errorf("database URL: cannot parse PostgreSQL connection string: %w", ErrInvalid)
		}
		db := stdlib.OpenDB(*cfg)
		db.SetMaxOpenConns(20)
		db.SetMaxIdleConns(10)
		db.SetConnMaxIdleTime(5 * time.Minute)
		db.SetConnMaxLifetime(time.Hour)
		return db, nil
	}
}

// parseURL splits databaseURL into its dialect and what the driver takes:
// a file path for SQLite, the URL itself for PostgreSQL.
func parseURL(databaseURL string) (dialect, target string, err error) {
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		return DialectPostgres, databaseURL, nil
	case strings.HasPrefix(databaseURL, "sqlite://"), strings.HasPrefix(databaseURL, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(databaseURL, "sqlite://"), "sqlite:")
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		if p, err := url.PathUnescape(path); err == nil {
			path = p
		}
		switch {
		case path == "":
			return "", "", fmt.Errorf("database URL: sqlite needs a file path (sqlite://PATH): %w", ErrInvalid)
		case path == memoryPath:
		case strings.HasPrefix(path, "file:") || strings.Contains(path, "mode=memory") || strings.HasPrefix(path, memoryPrefix):
			return "", "", fmt.Errorf("database URL: an in-memory sqlite database is sqlite://:memory:, a file is sqlite://PATH: %w", ErrInvalid)
		}
		return DialectSQLite, path, nil
	default:
		return "", "", fmt.Errorf("database URL: want postgres://…, postgresql://… or sqlite://PATH: %w", ErrInvalid)
	}
}

// sqliteDSN is the modernc.org/sqlite data source for the file at path, or
// for the in-memory database Open named, with foreign keys on or off.
func sqliteDSN(path string, foreignKeys bool) string {
	fk := "foreign_keys(0)"
	if foreignKeys {
		fk = "foreign_keys(1)"
	}
	q := url.Values{}
	if name, ok := strings.CutPrefix(path, memoryPrefix); ok {
		q.Set("mode", "memory")
		q.Set("cache", "shared") // the migrator's connection reaches it too
		q.Add("_pragma", fk)
		q.Add("_pragma", "busy_timeout("+strconv.FormatInt(Timeout.Milliseconds(), 10)+")")
		q.Set("_time_format", "sqlite")
		return "file:throttle-" + name + "?" + q.Encode()
	}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(Timeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", fk)
	q.Add("_pragma", "synchronous(NORMAL)")
	// Write transactions take the write lock at BEGIN, so two processes on
	// one file wait for each other (busy_timeout) instead of failing with
	// SQLITE_BUSY when a read lock cannot be upgraded.
	q.Set("_txlock", "immediate")
	q.Set("_time_format", "sqlite")
	return "file:" + path + "?" + q.Encode()
}

// Close closes the database.
func (db *DB) Close() error { return db.sql.Close() }

// Dialect returns "sqlite" or "postgres".
func (db *DB) Dialect() string { return db.dialect }

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) (err error) {
	ctx, end := db.begin(ctx, "ping")
	defer end(&err)
	if err := db.sql.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s database: %w", db.dialect, err)
	}
	return nil
}

// q rewrites a query written with '?' placeholders for the dialect:
// PostgreSQL wants $1, $2, …. Queries never contain '?' elsewhere.
func (db *DB) q(query string) string {
	if db.dialect != DialectPostgres {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// inTx runs fn in a transaction, committing when fn returns nil.
func (db *DB) inTx(ctx context.Context, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := db.sql.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// violation is what a constraint error was about.
type violation int

const (
	noViolation violation = iota
	uniqueViolation
	foreignKeyViolation
)

// classify maps a driver error to a constraint violation and, for unique
// violations, the constraint's name or columns ("clients_email_key" on
// PostgreSQL, "clients.email" on SQLite), so callers can name the field.
func classify(err error) (violation, string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return uniqueViolation, pgErr.ConstraintName
		case "23503":
			return foreignKeyViolation, pgErr.ConstraintName
		}
		return noViolation, ""
	}
	var sqErr *sqlite.Error
	if errors.As(err, &sqErr) {
		msg := sqErr.Error()
		switch sqErr.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return uniqueViolation, afterColon(msg, "constraint failed:")
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return foreignKeyViolation, ""
		}
		// Extended codes switched off: fall back to the message.
		switch {
		case strings.Contains(msg, "UNIQUE constraint failed"):
			return uniqueViolation, afterColon(msg, "constraint failed:")
		case strings.Contains(msg, "FOREIGN KEY constraint failed"):
			return foreignKeyViolation, ""
		}
	}
	return noViolation, ""
}

func afterColon(msg, marker string) string {
	i := strings.Index(msg, marker)
	if i < 0 {
		return ""
	}
	s := strings.TrimSpace(msg[i+len(marker):])
	if j := strings.IndexByte(s, ')'); j >= 0 {
		s = s[:j]
	}
	return s
}

// timeScanner scans a timestamp column on either dialect: PostgreSQL gives
// a time.Time, SQLite may give a time.Time or the text it stored.
type timeScanner struct{ t *time.Time }

var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05",
}

func (s timeScanner) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		*s.t = v.UTC()
		return nil
	case string:
		return s.parse(v)
	case []byte:
		return s.parse(string(v))
	case int64:
		*s.t = time.Unix(v, 0).UTC()
		return nil
	case nil:
		*s.t = time.Time{}
		return nil
	}
	return fmt.Errorf("scan time: unsupported type %T", v)
}

func (s timeScanner) parse(v string) error {
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			*s.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("scan time: cannot parse %q", v)
}

// timestamp is the creation time stored for a new row: UTC, rounded to the
// microsecond that PostgreSQL keeps, so a created value reads back equal.
func (db *DB) timestamp() time.Time {
	return db.now().UTC().Truncate(time.Microsecond)
}
