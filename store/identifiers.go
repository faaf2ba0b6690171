package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// IdentifierUsage counts the /check decisions of one identifier of a client.
type IdentifierUsage struct {
	ClientID   string
	Identifier string
	Allowed    int64
	Rejected   int64
	// LastSeen is when the identifier was last checked, to within the usage
	// recorder's flush interval (whole seconds in the database).
	LastSeen time.Time
}

// Total is Allowed + Rejected.
func (u IdentifierUsage) Total() int64 { return u.Allowed + u.Rejected }

// IdentifierRetention is how long an identifier that is no longer checked
// keeps its counts: PruneIdentifierUsage (which the usage recorder runs
// every hour) deletes the counts of identifiers unseen for longer.
const IdentifierRetention = 24 * time.Hour

// MaxTopIdentifiers is the most identifiers TopIdentifiers returns.
const MaxTopIdentifiers = 100

// identifierKey is one row of the identifier_usage table.
type identifierKey struct{ clientID, identifier string }

// trackedIdentifier reports whether identifier can be counted per
// identifier: the rules of an exemption's identifier.
func trackedIdentifier(identifier string) bool {
	n := utf8.RuneCountInString(identifier)
	return n > 0 && n <= maxIdentifierLen && cleanText(identifier)
}

// addIdentifierUsage adds the deltas (each Allowed and Rejected ≥ 0, one
// row per client and identifier) inside tx, in a fixed order so concurrent
// replicas never deadlock. last_seen only moves forward.
func (db *DB) addIdentifierUsage(ctx context.Context, tx *sql.Tx, deltas []IdentifierUsage) error {
	if len(deltas) == 0 {
		return nil
	}
	slices.SortFunc(deltas, func(a, b IdentifierUsage) int {
		return cmp.Or(strings.Compare(a.ClientID, b.ClientID), strings.Compare(a.Identifier, b.Identifier))
	})
	stmt, err := tx.PrepareContext(ctx, db.q(`INSERT INTO identifier_usage (client_id, identifier, allowed, rejected, last_seen)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (client_id, identifier) DO UPDATE SET
			allowed = identifier_usage.allowed + excluded.allowed,
			rejected = identifier_usage.rejected + excluded.rejected,
			last_seen = CASE WHEN excluded.last_seen > identifier_usage.last_seen
				THEN excluded.last_seen ELSE identifier_usage.last_seen END`))
	if err != nil {
		return fmt.Errorf("add identifier usage: %w", err)
	}
	defer stmt.Close()
	for _, d := range deltas {
		if d.Allowed == 0 && d.Rejected == 0 {
			continue
		}
		if _, err := stmt.ExecContext(ctx, usageClientID(d.ClientID), d.Identifier, d.Allowed, d.Rejected, d.LastSeen.Unix()); err != nil {
			return fmt.Errorf("add identifier usage: %w", err)
		}
	}
	return nil
}

const identifierColumns = `identifier, allowed, rejected, last_seen`

func scanIdentifierUsage(clientID string) func(rowScanner) (IdentifierUsage, error) {
	return func(row rowScanner) (IdentifierUsage, error) {
		u := IdentifierUsage{ClientID: clientID}
		var seen int64
		if err := row.Scan(&u.Identifier, &u.Allowed, &u.Rejected, &seen); err != nil {
			return IdentifierUsage{}, err
		}
		u.LastSeen = time.Unix(seen, 0).UTC()
		return u, nil
	}
}

// TopIdentifiers returns the client's n most checked identifiers (n is
// capped at MaxTopIdentifiers), most decisions first, then most rejected,
// then by identifier. Counts not yet flushed by a UsageRecorder are not in
// it; UsageRecorder.TopIdentifiers adds them.
func (db *DB) TopIdentifiers(ctx context.Context, clientID string, n int) (_ []IdentifierUsage, err error) {
	ctx, end := db.begin(ctx, "top_identifiers")
	defer end(&err)
	n = min(n, MaxTopIdentifiers)
	if n <= 0 {
		return []IdentifierUsage{}, nil
	}
	id := usageClientID(clientID)
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT `+identifierColumns+` FROM identifier_usage WHERE client_id = ?
		ORDER BY allowed + rejected DESC, rejected DESC, `+db.byteOrder("identifier")+` LIMIT ?`), id, n)
	if err != nil {
		return nil, fmt.Errorf("read top identifiers: %w", err)
	}
	return collect(rows, scanIdentifierUsage(clientID), "read top identifiers")
}

// identifierUsage returns the stored counts of the given identifiers of the
// client (those with none are left out).
func (db *DB) identifierUsage(ctx context.Context, clientID string, identifiers []string) (_ []IdentifierUsage, err error) {
	ctx, end := db.begin(ctx, "identifier_usage")
	defer end(&err)
	if len(identifiers) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(identifiers)+1)
	args = append(args, usageClientID(clientID))
	for _, s := range identifiers {
		args = append(args, s)
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(identifiers)), ", ")
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT `+identifierColumns+` FROM identifier_usage
		WHERE client_id = ? AND identifier IN (`+marks+`)`), args...)
	if err != nil {
		return nil, fmt.Errorf("read identifier usage: %w", err)
	}
	return collect(rows, scanIdentifierUsage(clientID), "read identifier usage")
}

// PruneIdentifierUsage deletes the per-identifier counts of identifiers last
// seen before before, and returns how many it deleted.
func (db *DB) PruneIdentifierUsage(ctx context.Context, before time.Time) (_ int64, err error) {
	defer db.markUnavailable("prune_identifier_usage", &err) // no Timeout: a clean-up that may take long
	res, err := db.sql.ExecContext(ctx, db.q(`DELETE FROM identifier_usage WHERE last_seen < ?`), before.Unix())
	if err != nil {
		return 0, fmt.Errorf("prune identifier usage: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune identifier usage: %w", err)
	}
	return n, nil
}

// byteOrder makes column sort by bytes in both dialects (PostgreSQL's
// default collation may not), so the database and Go agree on ties.
func (db *DB) byteOrder(column string) string {
	if db.dialect == DialectPostgres {
		return column + ` COLLATE "C"`
	}
	return column
}

// sortIdentifierUsage orders as TopIdentifiers does.
func sortIdentifierUsage(list []IdentifierUsage) {
	slices.SortFunc(list, func(a, b IdentifierUsage) int {
		return cmp.Or(cmp.Compare(b.Total(), a.Total()), cmp.Compare(b.Rejected, a.Rejected), strings.Compare(a.Identifier, b.Identifier))
	})
}
