package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Every write to a client's rows bumps the revision and records which
// client it changed (table changes), so a cache brings itself up to date by
// reading the rows of the clients changed since its revision, not every
// client's (ChangesSince).

// changesKept is how many revisions the changes log reaches back: a cache
// further behind reloads whole. changesPruneEvery is how often, in
// revisions, the older rows are deleted.
const (
	changesKept       = 10_000
	changesPruneEvery = 100
)

// maxChangedClients is the most clients ChangesSince reads the rows of; a
// cache behind by more changes than that reloads whole.
const maxChangedClients = 500

// bumpRevision increments the revision inside tx and records that it
// changed clientID's rows; every write to clients, rules, exemptions,
// overrides and keys calls it, so caches know what to reload.
func (db *DB) bumpRevision(ctx context.Context, tx *sql.Tx, clientID string) error {
	var rev int64
	if err := tx.QueryRowContext(ctx, db.q(`UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`)).Scan(&rev); err != nil {
		return fmt.Errorf("bump revision: %w", err)
	}
	if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO changes (revision, client_id) VALUES (?, ?)`), rev, clientID); err != nil {
		return fmt.Errorf("record change: %w", err)
	}
	if rev%changesPruneEvery == 0 {
		if _, err := tx.ExecContext(ctx, db.q(`DELETE FROM changes WHERE revision <= ?`), rev-changesKept); err != nil {
			return fmt.Errorf("prune changes: %w", err)
		}
	}
	return nil
}

// Changes is what changed in the database since a revision.
type Changes struct {
	// Snapshot holds the revision now and the rows of the Changed clients
	// (every row when Full).
	Snapshot
	// Full: Snapshot is the whole database (the log does not reach back to
	// the revision asked about, or too many clients changed).
	Full bool
	// Changed are the ids of the clients whose rows changed; a changed
	// client missing from Snapshot.Clients no longer exists.
	Changed []string
}

// ChangesSince reads, in one consistent read, what changed since revision
// since: nothing when the revision is still since; the rows of the clients
// that changed; or, when the log cannot say (since < 0, pruned, or more
// than maxChangedClients clients changed), everything (Full).
func (db *DB) ChangesSince(ctx context.Context, since int64) (_ Changes, err error) {
	ctx, end := db.begin(ctx, "changes_since")
	defer end(&err)
	var c Changes
	err = db.inReadTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, db.q(`SELECT value FROM revision WHERE id = 1`)).Scan(&c.Revision); err != nil {
			return fmt.Errorf("read revision: %w", err)
		}
		if c.Revision == since {
			return nil
		}
		changed, ok, err := db.changedClients(ctx, tx, since, c.Revision)
		if err != nil {
			return err
		}
		if !ok {
			c.Full = true
			return db.readRows(ctx, tx, nil, &c.Snapshot)
		}
		c.Changed = changed
		return db.readRows(ctx, tx, changed, &c.Snapshot)
	})
	if err != nil {
		return Changes{}, err
	}
	return c, nil
}

// changedClients returns the clients the revisions after since, up to
// rev, changed; ok is false when the log does not hold every one of those
// revisions, or they changed more than maxChangedClients clients.
func (db *DB) changedClients(ctx context.Context, tx *sql.Tx, since, rev int64) (_ []string, ok bool, err error) {
	if since < 0 || since > rev {
		return nil, false, nil
	}
	rows, err := tx.QueryContext(ctx, db.q(`SELECT revision, client_id FROM changes WHERE revision > ? AND revision <= ? ORDER BY revision`), since, rev)
	if err != nil {
		return nil, false, fmt.Errorf("read changes: %w", err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	var ids []string
	next := since + 1
	for rows.Next() {
		var r int64
		var id string
		if err := rows.Scan(&r, &id); err != nil {
			return nil, false, fmt.Errorf("read changes: %w", err)
		}
		if r != next {
			return nil, false, rows.Close() // a revision the log no longer has
		}
		next++
		if !seen[id] {
			if seen[id] = true; len(seen) > maxChangedClients {
				return nil, false, rows.Close()
			}
			ids = append(ids, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read changes: %w", err)
	}
	return ids, next == rev+1, nil
}
