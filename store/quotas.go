package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Quotas cap what one client may keep, so that no client can grow the
// database and every replica's cache for the others. A zero field is no
// cap.
type Quotas struct {
	Rules      int // rules per client
	Exemptions int // exemptions per client
	Overrides  int // overrides per client, over all its rules (each rule also has MaxOverridesPerRule)
	Keys       int // minted API keys per client (CreateKey)
	// Clients caps the clients in all (CreateClient), so the per-client
	// caps bound the whole: a registration past it is a QuotaError of
	// "clients".
	Clients int
}

// SetQuotas sets the caps of every later write. Call it before serving.
func (db *DB) SetQuotas(q Quotas) { db.quotas = q }

// QuotaError is a write refused because the client has as many rows of a
// kind as its quota allows. It wraps ErrTooMany.
type QuotaError struct {
	What string // "rules", "exemptions", "overrides", "keys"
	Max  int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("the client has %d %s, the most it may have", e.Max, e.What)
}

func (e *QuotaError) Unwrap() error { return ErrTooMany }

// checkClients refuses a new client, in tx, when there are max clients
// already (max 0: no cap). On PostgreSQL it first locks the table against
// other inserts, so two registrations count in turn.
func (db *DB) checkClients(ctx context.Context, tx *sql.Tx, max int) error {
	if max <= 0 {
		return nil
	}
	if db.dialect == DialectPostgres {
		if _, err := tx.ExecContext(ctx, `LOCK TABLE clients IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("lock clients: %w", err)
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM clients`).Scan(&n); err != nil {
		return fmt.Errorf("count clients: %w", err)
	}
	if n >= max {
		return &QuotaError{What: "clients", Max: max}
	}
	return nil
}

// checkQuota refuses a new row of table for clientID, in tx, when the
// client has max of them already (max 0: no cap). On PostgreSQL it first
// locks the client's row, so two writes of one client count in turn (on
// SQLite a write transaction already excludes the others).
func (db *DB) checkQuota(ctx context.Context, tx *sql.Tx, clientID, table, what string, max int) error {
	if max <= 0 {
		return nil
	}
	if db.dialect == DialectPostgres {
		if _, err := tx.ExecContext(ctx, db.q(`SELECT id FROM clients WHERE id = ? FOR UPDATE`), clientID); err != nil {
			return fmt.Errorf("lock client: %w", err)
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, db.q(`SELECT count(*) FROM `+table+` WHERE client_id = ?`), clientID).Scan(&n); err != nil {
		return fmt.Errorf("count %s: %w", what, err)
	}
	if n >= max {
		return &QuotaError{What: what, Max: max}
	}
	return nil
}
