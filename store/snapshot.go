package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Revision returns the revision counter, which every write to clients, rules
// and exemptions increments in its own transaction. AddUsage does not.
func (db *DB) Revision(ctx context.Context) (_ int64, err error) {
	ctx, end := db.begin(ctx, "revision")
	defer end(&err)
	var rev int64
	if err := db.sql.QueryRowContext(ctx, db.q(`SELECT value FROM revision WHERE id = 1`)).Scan(&rev); err != nil {
		return 0, fmt.Errorf("read revision: %w", err)
	}
	return rev, nil
}

// Snapshot reads every client (with its key hash), rule, exemption,
// override and minted key, and the revision they belong to, in one consistent read.
// Clients come in creation order, rules by client then creation order,
// exemptions by client then identifier.
func (db *DB) Snapshot(ctx context.Context) (_ Snapshot, err error) {
	ctx, end := db.begin(ctx, "snapshot")
	defer end(&err)
	var s Snapshot
	err = db.inReadTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, db.q(`SELECT value FROM revision WHERE id = 1`)).Scan(&s.Revision); err != nil {
			return fmt.Errorf("snapshot revision: %w", err)
		}
		return db.readRows(ctx, tx, nil, &s)
	})
	if err != nil {
		return Snapshot{}, err
	}
	return s, nil
}

// inReadTx runs fn in a transaction that sees one consistent state of the
// database (PostgreSQL: repeatable read, read only; SQLite's transactions
// always do).
func (db *DB) inReadTx(ctx context.Context, fn func(*sql.Tx) error) error {
	var opts *sql.TxOptions
	if db.dialect == DialectPostgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	return db.inTx(ctx, opts, fn)
}

// readRows reads into s the rows of the clients ids, or of every client
// when ids is nil, in tx.
func (db *DB) readRows(ctx context.Context, tx *sql.Tx, ids []string, s *Snapshot) error {
	var args []any
	for _, id := range ids {
		args = append(args, id)
	}
	query := func(table, columns, idColumn, order string) (*sql.Rows, error) {
		q := `SELECT ` + columns + ` FROM ` + table
		if ids != nil {
			q += ` WHERE ` + idColumn + ` IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `)`
		}
		return tx.QueryContext(ctx, db.q(q+` ORDER BY `+order), args...)
	}
	var err error
	rows, qerr := query("clients", clientColumns+", api_key_hash", "id", "created_at, id")
	if s.Clients, err = queryAll(rows, qerr, scanClientKey, "snapshot clients"); err != nil {
		return err
	}
	rows, qerr = query("rules", ruleColumns, "client_id", "client_id, id")
	if s.Rules, err = queryAll(rows, qerr, scanRule, "snapshot rules"); err != nil {
		return err
	}
	rows, qerr = query("exemptions", exemptionColumns, "client_id", "client_id, identifier")
	if s.Exemptions, err = queryAll(rows, qerr, scanExemption, "snapshot exemptions"); err != nil {
		return err
	}
	rows, qerr = query("rule_overrides", overrideColumns, "client_id", "client_id, rule_name, identifier")
	if s.Overrides, err = queryAll(rows, qerr, scanOverride, "snapshot overrides"); err != nil {
		return err
	}
	rows, qerr = query("api_keys", keyColumns, "client_id", "client_id, created_at, id")
	s.Keys, err = queryAll(rows, qerr, scanKey, "snapshot keys")
	return err
}

// queryAll collects the rows of a query, which may have failed (err).
func queryAll[T any](rows *sql.Rows, err error, scan func(rowScanner) (T, error), what string) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return collect(rows, scan, what)
}

func scanClientKey(row rowScanner) (ClientKey, error) {
	var hash []byte
	c, err := scanClient(row, &hash)
	if err != nil {
		return ClientKey{}, err
	}
	if len(hash) != 32 {
		return ClientKey{}, fmt.Errorf("client %s: api key hash has %d bytes, want 32", c.ID, len(hash))
	}
	ck := ClientKey{Client: c}
	copy(ck.KeyHash[:], hash)
	return ck, nil
}
