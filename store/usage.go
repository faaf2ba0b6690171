package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// usageKey is one row of the usage table.
type usageKey struct{ clientID, algorithm string }

// usageCount is what a usage row counts.
type usageCount struct{ allowed, rejected int64 }

// AddUsage adds deltas to the usage counts, atomically, in one transaction.
//
// Each delta counts one client's decisions under one algorithm: ByAlgorithm
// holds that algorithm with Allowed+Rejected as its value (ByAlgorithm may be
// empty for decisions of no particular algorithm; TotalChecks is ignored).
// Several deltas may name the same client. Counts are added with
// INSERT … ON CONFLICT DO UPDATE, so concurrent callers (several replicas)
// never lose an increment.
func (db *DB) AddUsage(ctx context.Context, deltas []Usage) error {
	return db.addUsage(ctx, deltas, nil)
}

// addUsage is AddUsage that also adds per-identifier counts (checked by the
// caller), all in one transaction.
func (db *DB) addUsage(ctx context.Context, deltas []Usage, idents []IdentifierUsage) (err error) {
	ctx, end := db.begin(ctx, "add_usage")
	defer end(&err)
	sum := make(map[usageKey]usageCount, len(deltas))
	for i, d := range deltas {
		k, c, err := usageRow(d)
		if err != nil {
			return fmt.Errorf("usage[%d]: %w", i, err)
		}
		s := sum[k]
		s.allowed += c.allowed
		s.rejected += c.rejected
		sum[k] = s
	}
	if len(sum) == 0 && len(idents) == 0 {
		return nil
	}
	// A fixed order: two concurrent batches lock rows in the same order, so
	// PostgreSQL never sees them deadlock.
	keys := make([]usageKey, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b usageKey) int {
		return cmp.Or(strings.Compare(a.clientID, b.clientID), strings.Compare(a.algorithm, b.algorithm))
	})
	return db.inTx(ctx, nil, func(tx *sql.Tx) error {
		if len(keys) == 0 {
			return db.addIdentifierUsage(ctx, tx, idents)
		}
		stmt, err := tx.PrepareContext(ctx, db.q(`INSERT INTO usage (client_id, algorithm, allowed, rejected)
			VALUES (?, ?, ?, ?)
			ON CONFLICT (client_id, algorithm) DO UPDATE SET
				allowed = usage.allowed + excluded.allowed,
				rejected = usage.rejected + excluded.rejected`))
		if err != nil {
			return fmt.Errorf("add usage: %w", err)
		}
		defer stmt.Close()
		for _, k := range keys {
			c := sum[k]
			if c.allowed == 0 && c.rejected == 0 {
				continue
			}
			if _, err := stmt.ExecContext(ctx, k.clientID, k.algorithm, c.allowed, c.rejected); err != nil {
				return fmt.Errorf("add usage: %w", err)
			}
		}
		return db.addIdentifierUsage(ctx, tx, idents)
	})
}

// usageRow checks one AddUsage delta and turns it into a row increment.
func usageRow(d Usage) (usageKey, usageCount, error) {
	id := usageClientID(d.ClientID)
	if id == "" {
		return usageKey{}, usageCount{}, invalid("client_id is required")
	}
	if d.Allowed < 0 || d.Rejected < 0 {
		return usageKey{}, usageCount{}, invalid("allowed and rejected must not be negative")
	}
	k := usageKey{clientID: id}
	switch len(d.ByAlgorithm) {
	case 0:
	case 1:
		for name, n := range d.ByAlgorithm {
			if n != d.Allowed+d.Rejected {
				return usageKey{}, usageCount{}, invalid("by_algorithm[%q] must equal allowed + rejected", name)
			}
			if len(name) > maxNameLen || !cleanText(name) {
				return usageKey{}, usageCount{}, invalid("algorithm name is too long or not text")
			}
			k.algorithm = name
		}
	default:
		return usageKey{}, usageCount{}, invalid("by_algorithm must name one algorithm per delta")
	}
	return k, usageCount{allowed: d.Allowed, rejected: d.Rejected}, nil
}

// usageClientID canonicalises a client id for the usage table: UUIDs in
// their canonical form, anything else as given.
func usageClientID(id string) string {
	if u, ok := clientUUID(id); ok {
		return u
	}
	return strings.TrimSpace(id)
}

// Usage returns the client's counts. A client with no counts (or no such
// client) has zero usage.
func (db *DB) Usage(ctx context.Context, clientID string) (_ Usage, err error) {
	ctx, end := db.begin(ctx, "usage")
	defer end(&err)
	id := usageClientID(clientID)
	u := Usage{ClientID: clientID, ByAlgorithm: map[string]int64{}}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT algorithm, allowed, rejected FROM usage WHERE client_id = ?`), id)
	if err != nil {
		return Usage{}, fmt.Errorf("read usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			algorithm string
			c         usageCount
		)
		if err := rows.Scan(&algorithm, &c.allowed, &c.rejected); err != nil {
			return Usage{}, fmt.Errorf("read usage: %w", err)
		}
		u.add(algorithm, c)
	}
	if err := rows.Err(); err != nil {
		return Usage{}, fmt.Errorf("read usage: %w", err)
	}
	return u, nil
}

// add counts c decisions of algorithm into u.
func (u *Usage) add(algorithm string, c usageCount) {
	u.Allowed += c.allowed
	u.Rejected += c.rejected
	u.TotalChecks += c.allowed + c.rejected
	if algorithm != "" && c.allowed+c.rejected != 0 {
		if u.ByAlgorithm == nil {
			u.ByAlgorithm = map[string]int64{}
		}
		u.ByAlgorithm[algorithm] += c.allowed + c.rejected
	}
}
