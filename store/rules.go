package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

const ruleColumns = `client_id, name, algorithm, "limit", window_seconds, refill_rate, accuracy, scope, always_count, rate_limits, descriptors, reserve, created_at`

// CreateRule stores r for r.ClientID and returns it with CreatedAt set. A
// limit without an Algorithm takes the client's DefaultAlgorithm. A name the client
// already uses is ErrConflict; an unknown client is ErrNotFound; a client
// at its quota of rules is a *QuotaError (ErrTooMany).
func (db *DB) CreateRule(ctx context.Context, r Rule) (_ Rule, err error) {
	ctx, end := db.begin(ctx, "create_rule")
	defer end(&err)
	r, cols, err := db.prepareRule(ctx, r)
	if err != nil {
		return Rule{}, err
	}
	descriptors := cols.descriptors
	r.CreatedAt = db.timestamp()
	err = db.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := db.checkQuota(ctx, tx, r.ClientID, "rules", "rules", db.quotas.Rules); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, db.q(`INSERT INTO rules
			(client_id, name, algorithm, "limit", window_seconds, refill_rate, accuracy, scope, always_count, rate_limits, descriptors, reserve, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			r.ClientID, r.Name, string(r.Limit.Algorithm), r.Limit.Limit, windowSeconds(r.Limit), r.Limit.RefillRate, r.Limit.Accuracy.String(), r.Limit.ScopeName(),
			r.AlwaysCount, cols.rateLimits, descriptors, cols.reserve, r.CreatedAt)
		if err != nil {
			return err
		}
		return db.bumpRevision(ctx, tx, r.ClientID)
	})
	if err != nil {
		return Rule{}, ruleWriteError("create", r, descriptors, err)
	}
	return r, nil
}

// UpdateRule replaces the limit and descriptors of the client's rule called
// r.Name with r's, keeping its name and CreatedAt, and returns the rule as
// stored. A limit without an Algorithm takes the client's DefaultAlgorithm,
// as in CreateRule. No such rule (for this
// client) is ErrNotFound; descriptors another rule of the client has are
// ErrDuplicateDescriptors.
//
// Counters are keyed by the rule's name and algorithm, so a rule that keeps
// its algorithm keeps its counters (hits already counted in the current
// window count against the new limit), and one that changes it starts afresh.
func (db *DB) UpdateRule(ctx context.Context, r Rule) (_ Rule, err error) {
	ctx, end := db.begin(ctx, "update_rule")
	defer end(&err)
	r, cols, err := db.prepareRule(ctx, r)
	if err != nil {
		return Rule{}, err
	}
	descriptors := cols.descriptors
	err = db.inTx(ctx, nil, func(tx *sql.Tx) error {
		row := tx.QueryRowContext(ctx, db.q(`UPDATE rules
			SET algorithm = ?, "limit" = ?, window_seconds = ?, refill_rate = ?, accuracy = ?, scope = ?, always_count = ?, rate_limits = ?, descriptors = ?, reserve = ?
			WHERE client_id = ? AND name = ?
			RETURNING created_at`),
			string(r.Limit.Algorithm), r.Limit.Limit, windowSeconds(r.Limit), r.Limit.RefillRate, r.Limit.Accuracy.String(), r.Limit.ScopeName(),
			r.AlwaysCount, cols.rateLimits, descriptors, cols.reserve, r.ClientID, r.Name)
		if err := row.Scan(timeScanner{&r.CreatedAt}); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("rule %q: %w", r.Name, ErrNotFound)
			}
			return err
		}
		return db.bumpRevision(ctx, tx, r.ClientID)
	})
	if errors.Is(err, ErrNotFound) {
		return Rule{}, err
	}
	if err != nil {
		return Rule{}, ruleWriteError("update", r, descriptors, err)
	}
	return r, nil
}

// ruleCols are a rule's columns encoded as JSON.
type ruleCols struct{ descriptors, rateLimits, reserve string }

// prepareRule checks r for CreateRule and UpdateRule: its client id in
// canonical form, the client's default algorithm where a limit has none,
// and its descriptors and rate limits encoded for their columns.
func (db *DB) prepareRule(ctx context.Context, r Rule) (Rule, ruleCols, error) {
	clientID, ok := clientUUID(r.ClientID)
	if !ok {
		return Rule{}, ruleCols{}, fmt.Errorf("client %q: %w", r.ClientID, ErrNotFound)
	}
	r.ClientID = clientID
	if needsDefaultAlgorithm(r) {
		// Checked with a stand-in first so a bad rule is refused without a query.
		if _, err := normalizeRule(withDefaultAlgorithm(r, standIn)); err != nil {
			return Rule{}, ruleCols{}, err
		}
		c, err := db.ClientByID(ctx, clientID)
		if err != nil {
			return Rule{}, ruleCols{}, err
		}
		r = withDefaultAlgorithm(r, func(algorithms.Limit) algorithms.Algorithm { return c.DefaultAlgorithm })
	}
	r, err := normalizeRule(r)
	if err != nil {
		return Rule{}, ruleCols{}, err
	}
	cols := ruleCols{descriptors: "[]", rateLimits: "[]"}
	if len(r.Descriptors) > 0 {
		b, err := json.Marshal(r.Descriptors)
		if err != nil {
			return Rule{}, ruleCols{}, fmt.Errorf("rule %q: encode descriptors: %w", r.Name, err)
		}
		cols.descriptors = string(b)
	}
	if len(r.RateLimits) > 0 {
		if cols.rateLimits, err = encodeRateLimits(r.RateLimits); err != nil {
			return Rule{}, ruleCols{}, fmt.Errorf("rule %q: encode rate_limits: %w", r.Name, err)
		}
	}
	if v := r.Reserve; v != nil {
		b, err := json.Marshal(storedReserve{Hits: v.Hits, TTLSeconds: int64(v.TTL / time.Second), Handle: v.Handle})
		if err != nil {
			return Rule{}, ruleCols{}, fmt.Errorf("rule %q: encode reserve: %w", r.Name, err)
		}
		cols.reserve = string(b)
	}
	return r, cols, nil
}

// needsDefaultAlgorithm reports whether r's limit, or one of its
// RateLimits, has no algorithm.
func needsDefaultAlgorithm(r Rule) bool {
	if len(r.RateLimits) == 0 {
		return r.Limit.Algorithm == ""
	}
	for _, l := range r.RateLimits {
		if l.Limit.Algorithm == "" {
			return true
		}
	}
	return false
}

// withDefaultAlgorithm gives alg(l) to r's limit l, and to every limit l
// of its RateLimits, that has none.
func withDefaultAlgorithm(r Rule, alg func(l algorithms.Limit) algorithms.Algorithm) Rule {
	if r.Limit.Algorithm == "" {
		r.Limit.Algorithm = alg(r.Limit)
	}
	if len(r.RateLimits) > 0 {
		r.RateLimits = slices.Clone(r.RateLimits)
		for i := range r.RateLimits {
			if l := r.RateLimits[i].Limit; l.Algorithm == "" {
				r.RateLimits[i].Limit.Algorithm = alg(l)
			}
		}
	}
	return r
}

// standIn is the algorithm a limit without one is checked with before the
// client's default is read: the one that refuses least. A token bucket
// needs no window; an approximate (or global) limit must be a window's.
func standIn(l algorithms.Limit) algorithms.Algorithm {
	if l.Accuracy == algorithms.Approximate || l.Global {
		return algorithms.FixedWindow
	}
	return algorithms.TokenBucket
}

// windowSeconds is l's window for the window_seconds column (normalizeRule
// has checked it is whole seconds).
func windowSeconds(l algorithms.Limit) int64 { return int64(l.Window / time.Second) }

// ruleWriteError turns a failed INSERT or UPDATE of rule r into the error
// callers branch on.
func ruleWriteError(op string, r Rule, descriptors string, err error) error {
	if errors.Is(err, ErrTooMany) {
		return err
	}
	switch kind, constraint := classify(err); kind {
	case uniqueViolation:
		if strings.Contains(constraint, "descriptors") {
			return fmt.Errorf("rule %q: descriptors %s: %w", r.Name, descriptors, ErrDuplicateDescriptors)
		}
		return fmt.Errorf("rule %q: %w", r.Name, ErrConflict)
	case foreignKeyViolation:
		return fmt.Errorf("client %q: %w", r.ClientID, ErrNotFound)
	}
	return fmt.Errorf("%s rule %q: %w", op, r.Name, err)
}

// Rules returns the client's rules ordered by name.
func (db *DB) Rules(ctx context.Context, clientID string) (_ []Rule, err error) {
	ctx, end := db.begin(ctx, "rules")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return []Rule{}, nil
	}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT `+ruleColumns+` FROM rules WHERE client_id = ? ORDER BY name`), id)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	return collect(rows, scanRule, "list rules")
}

// Rule returns the client's rule called name; another client's rule of the
// same name is ErrNotFound.
func (db *DB) Rule(ctx context.Context, clientID, name string) (_ Rule, err error) {
	ctx, end := db.begin(ctx, "rule")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return Rule{}, fmt.Errorf("rule %q: %w", name, ErrNotFound)
	}
	r, err := scanRule(db.sql.QueryRowContext(ctx, db.q(`SELECT `+ruleColumns+` FROM rules WHERE client_id = ? AND name = ?`), id, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Rule{}, fmt.Errorf("rule %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Rule{}, fmt.Errorf("get rule %q: %w", name, err)
	}
	return r, nil
}

// DeleteRule deletes the client's rule called name, or returns ErrNotFound.
func (db *DB) DeleteRule(ctx context.Context, clientID, name string) (err error) {
	ctx, end := db.begin(ctx, "delete_rule")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return fmt.Errorf("rule %q: %w", name, ErrNotFound)
	}
	return db.deleteOne(ctx, id, `DELETE FROM rules WHERE client_id = ? AND name = ?`, fmt.Sprintf("rule %q", name), id, name)
}

// deleteOne runs a DELETE of a row of clientID and bumps the revision when
// it removed one; what names the row in errors.
func (db *DB) deleteOne(ctx context.Context, clientID, query, what string, args ...any) error {
	errNone := fmt.Errorf("%s: %w", what, ErrNotFound)
	err := db.inTx(ctx, nil, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q(query), args...)
		if err != nil {
			return fmt.Errorf("delete %s: %w", what, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("delete %s: %w", what, err)
		}
		if n == 0 {
			return errNone
		}
		return db.bumpRevision(ctx, tx, clientID)
	})
	return err
}

// collect scans every row with scan and closes rows; the result is never nil.
func collect[T any](rows *sql.Rows, scan func(rowScanner) (T, error), what string) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// GlobalRule names a rule with a limit of scope global: its client (id,
// name, and Envoy domain if it has one) and its name.
type GlobalRule struct {
	ClientID, Client, Domain string
	Rule                     string
}

// GlobalRules returns every client's rules with a limit of scope global
// (the rule's, or one of its rate_limits), by client name and rule name:
// a server without a global Redis refuses to start with them.
func (db *DB) GlobalRules(ctx context.Context) (_ []GlobalRule, err error) {
	ctx, end := db.begin(ctx, "global_rules")
	defer end(&err)
	// rate_limits is JSON encodeRateLimits wrote, "scope":"global" as is.
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT c.id, c.name, coalesce(c.domain, ''), r.name
		FROM rules r JOIN clients c ON c.id = r.client_id
		WHERE r.scope = 'global' OR r.rate_limits LIKE '%"scope":"global"%'
		ORDER BY c.name, c.id, r.name`))
	if err != nil {
		return nil, fmt.Errorf("list global rules: %w", err)
	}
	return collect(rows, func(row rowScanner) (GlobalRule, error) {
		var g GlobalRule
		err := row.Scan(&g.ClientID, &g.Client, &g.Domain, &g.Rule)
		return g, err
	}, "list global rules")
}
