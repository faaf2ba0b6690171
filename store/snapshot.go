package store

import (
	"context"
	"database/sql"
	"fmt"
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

// Snapshot reads every client (with its key hash), rule, exemption and
// override, and
// the revision they belong to, in one consistent read. Clients come in
// creation order, rules by client then creation order, exemptions by client
// then identifier.
func (db *DB) Snapshot(ctx context.Context) (_ Snapshot, err error) {
	ctx, end := db.begin(ctx, "snapshot")
	defer end(&err)
	var opts *sql.TxOptions
	if db.dialect == DialectPostgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	var s Snapshot
	err = db.inTx(ctx, opts, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, db.q(`SELECT value FROM revision WHERE id = 1`)).Scan(&s.Revision); err != nil {
			return fmt.Errorf("snapshot revision: %w", err)
		}
		rows, err := tx.QueryContext(ctx, db.q(`SELECT `+clientColumns+`, api_key_hash FROM clients ORDER BY created_at, id`))
		if err != nil {
			return fmt.Errorf("snapshot clients: %w", err)
		}
		if s.Clients, err = collect(rows, scanClientKey, "snapshot clients"); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, db.q(`SELECT `+ruleColumns+` FROM rules ORDER BY client_id, id`))
		if err != nil {
			return fmt.Errorf("snapshot rules: %w", err)
		}
		if s.Rules, err = collect(rows, scanRule, "snapshot rules"); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, db.q(`SELECT `+exemptionColumns+` FROM exemptions ORDER BY client_id, identifier`))
		if err != nil {
			return fmt.Errorf("snapshot exemptions: %w", err)
		}
		if s.Exemptions, err = collect(rows, scanExemption, "snapshot exemptions"); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, db.q(`SELECT `+overrideColumns+` FROM rule_overrides ORDER BY client_id, rule_name, identifier`))
		if err != nil {
			return fmt.Errorf("snapshot overrides: %w", err)
		}
		s.Overrides, err = collect(rows, scanOverride, "snapshot overrides")
		return err
	})
	if err != nil {
		return Snapshot{}, err
	}
	return s, nil
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
