package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Timeout bounds one operation of a DB: the wait for a pooled connection
// (or for SQLite's write lock, as its busy timeout does) and every query of
// the operation. Past it the operation fails with ErrUnavailable.
// PruneIdentifierUsage, a background clean-up, has no bound of its own.
const Timeout = 10 * time.Second

// unavailableError marks a driver's error as ErrUnavailable: the database
// could not be reached, was busy, or did not answer within Timeout.
type unavailableError struct {
	op  string
	err error
}

func (e *unavailableError) Error() string {
	return "database unavailable (" + e.op + "): " + e.err.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// begin starts the operation op of the DB: ctx bounded by Timeout, and the
// function to defer with the operation's error, which ends it and marks the
// error ErrUnavailable when it says so (see markUnavailable).
func (db *DB) begin(ctx context.Context, op string) (context.Context, func(*error)) {
	ctx, cancel := context.WithTimeout(ctx, db.timeout)
	return ctx, func(err *error) {
		cancel()
		db.markUnavailable(op, err)
	}
}

// markUnavailable wraps *err as ErrUnavailable, counted in
// throttle_store_unavailable_total{op}, when it says that the database could
// not be reached, was busy or did not answer in time (unreachable). An error
// already marked (by an operation op called) is left as it is.
func (db *DB) markUnavailable(op string, err *error) {
	if *err == nil || errors.Is(*err, ErrUnavailable) || !unreachable(*err) {
		return
	}
	db.unavailable.WithLabelValues(op).Inc()
	*err = &unavailableError{op: op, err: *err}
}

// unreachable reports whether err says the database cannot serve now, for
// reasons of its own rather than the query's: PostgreSQL down, refusing or
// resetting connections, shutting down or starting up, out of connections
// or resources; SQLite busy or locked by another connection, or its file
// unreadable, unwritable or full; or no answer (no pooled connection
// either) before the deadline.
func unreachable(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true // whatever the cause: refused, shutting down, no such database, authentication
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Classes 08 (connection exception), 53 (insufficient resources:
		// disk full, out of memory, too many connections) and 58 (system
		// error: I/O); 57P01 to 57P03 (shut down by an administrator or a
		// crash, cannot connect now: starting up or shutting down).
		class := pgErr.Code[:min(2, len(pgErr.Code))]
		return class == "08" || class == "53" || class == "58" ||
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var sqErr *sqlite.Error
	if errors.As(err, &sqErr) {
		switch sqErr.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
