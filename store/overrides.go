package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/throttle-rl/throttle/algorithms"
)

// MaxOverridesPerRule is how many overrides one rule may have.
const MaxOverridesPerRule = 10_000

// ErrTooMany: a rule has MaxOverridesPerRule overrides already.
var ErrTooMany = errors.New("too many")

// Override replaces a rule's limit for one identifier, or for every
// identifier that starts with a prefix: an Identifier ending in '*' is the
// pattern of the identifiers that start with what comes before the '*'.
// The algorithm, the accuracy and the scope are always the rule's.
type Override struct {
	ClientID string
	Rule     string
	// Identifier is the identifier, or a prefix pattern ending in '*';
	// 1..256 characters.
	Identifier string
	// Limit replaces the rule's limit: 1..algorithms.MaxLimit (at most
	// Envoy's 4294967295 for a rule with descriptors).
	Limit int64
	// Window replaces the rule's window when not 0: whole seconds.
	Window    time.Duration
	CreatedAt time.Time
}

// Pattern reports whether o is a prefix pattern, and its prefix.
func (o Override) Pattern() (string, bool) {
	return strings.CutSuffix(o.Identifier, "*")
}

// Apply returns the rule's limit l with the override's limit and window;
// the rest of l (algorithm, refill rate, accuracy, scope) is kept.
func (o Override) Apply(l algorithms.Limit) algorithms.Limit {
	l.Limit = o.Limit
	if o.Window != 0 {
		l.Window = o.Window
	}
	return l
}

const overrideColumns = `client_id, rule_name, identifier, "limit", window_seconds, created_at`

func scanOverride(row rowScanner) (Override, error) {
	var o Override
	var secs int64
	err := row.Scan(&o.ClientID, &o.Rule, &o.Identifier, &o.Limit, &secs, timeScanner{&o.CreatedAt})
	o.Window = time.Duration(secs) * time.Second
	return o, err
}

// PutOverride stores o, or replaces the rule's override of o.Identifier
// (keeping its CreatedAt), and returns it as stored and whether it is new.
// No such rule is ErrNotFound; an override the rule cannot take (a rule of
// several limits, a limit or window its algorithm refuses) is ErrInvalid;
// a new override past MaxOverridesPerRule is ErrTooMany, and one past the
// client's quota of overrides a *QuotaError (ErrTooMany too).
func (db *DB) PutOverride(ctx context.Context, o Override) (_ Override, created bool, err error) {
	ctx, end := db.begin(ctx, "put_override")
	defer end(&err)
	id, ok := clientUUID(o.ClientID)
	if !ok {
		return Override{}, false, fmt.Errorf("rule %q: %w", o.Rule, ErrNotFound)
	}
	o.ClientID = id
	if err := checkOverrideIdentifier(o.Identifier); err != nil {
		return Override{}, false, err
	}
	o.CreatedAt = db.timestamp()
	err = db.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := db.checkOverride(ctx, tx, o); err != nil {
			return err
		}
		var n, exists int
		if err := tx.QueryRowContext(ctx, db.q(`SELECT count(*), coalesce(sum(CASE WHEN identifier = ? THEN 1 ELSE 0 END), 0)
			FROM rule_overrides WHERE client_id = ? AND rule_name = ?`), o.Identifier, o.ClientID, o.Rule).Scan(&n, &exists); err != nil {
			return fmt.Errorf("count overrides: %w", err)
		}
		if exists == 0 && n >= MaxOverridesPerRule {
			return fmt.Errorf("rule %q has %d overrides, the most a rule may have: %w", o.Rule, n, ErrTooMany)
		}
		if exists == 0 {
			if err := db.checkQuota(ctx, tx, o.ClientID, "rule_overrides", "overrides", db.quotas.Overrides); err != nil {
				return err
			}
		}
		created = exists == 0
		row := tx.QueryRowContext(ctx, db.q(`INSERT INTO rule_overrides (client_id, rule_name, identifier, "limit", window_seconds, created_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (client_id, rule_name, identifier) DO UPDATE SET "limit" = excluded."limit", window_seconds = excluded.window_seconds
			RETURNING created_at`), o.ClientID, o.Rule, o.Identifier, o.Limit, int64(o.Window/time.Second), o.CreatedAt)
		if err := row.Scan(timeScanner{&o.CreatedAt}); err != nil {
			return fmt.Errorf("store override: %w", err)
		}
		return db.bumpRevision(ctx, tx, o.ClientID)
	})
	if err != nil {
		return Override{}, false, err
	}
	return o, created, nil
}

// checkOverride checks o against its rule, read (and on PostgreSQL locked,
// so that the count of its overrides holds) in tx.
func (db *DB) checkOverride(ctx context.Context, tx *sql.Tx, o Override) error {
	lock := ""
	if db.dialect == DialectPostgres {
		lock = " FOR UPDATE"
	}
	var (
		alg, accuracy, scope string
		limit, secs          int64
		refill               float64
		rateLimits, descJSON string
	)
	err := tx.QueryRowContext(ctx, db.q(`SELECT algorithm, "limit", window_seconds, refill_rate, accuracy, scope, rate_limits, descriptors
		FROM rules WHERE client_id = ? AND name = ?`+lock), o.ClientID, o.Rule).Scan(&alg, &limit, &secs, &refill, &accuracy, &scope, &rateLimits, &descJSON)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("rule %q: %w", o.Rule, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("read rule %q: %w", o.Rule, err)
	}
	if rateLimits != "" && rateLimits != "[]" {
		return invalid("rule %q has several limits (rate_limits): an override replaces a rule's one limit", o.Rule)
	}
	if o.Window%time.Second != 0 || o.Window < 0 {
		return invalid("window must be a whole number of seconds")
	}
	l := o.Apply(algorithms.Limit{Algorithm: algorithms.Algorithm(alg), Limit: limit, Window: time.Duration(secs) * time.Second, RefillRate: refill,
		Accuracy: algorithms.Accuracy(accuracy), Global: scope == algorithms.ScopeGlobal})
	if err := l.Validate(); err != nil {
		return &refusal{reason: err.Error(), cause: err}
	}
	var ds []DescriptorEntry
	if json.Unmarshal([]byte(descJSON), &ds) == nil && len(ds) > 0 && o.Limit > math.MaxUint32 {
		return invalid("limit of an override of a rule with descriptors must be at most %d (Envoy's requests_per_unit)", uint32(math.MaxUint32))
	}
	return nil
}

// checkOverrideIdentifier checks an override's identifier or pattern.
func checkOverrideIdentifier(id string) error {
	switch n := utf8.RuneCountInString(id); {
	case n == 0:
		return invalid("identifier is required")
	case n > maxIdentifierLen:
		return invalid("identifier is longer than %d characters", maxIdentifierLen)
	case !cleanText(id):
		return invalid("identifier is not valid UTF-8 text")
	}
	return nil
}

// Overrides returns the overrides of the client's rule, by identifier; no
// such rule is ErrNotFound.
func (db *DB) Overrides(ctx context.Context, clientID, rule string) (_ []Override, err error) {
	ctx, end := db.begin(ctx, "overrides")
	defer end(&err)
	if _, err := db.Rule(ctx, clientID, rule); err != nil {
		return nil, err
	}
	id, _ := clientUUID(clientID)
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT `+overrideColumns+` FROM rule_overrides
		WHERE client_id = ? AND rule_name = ? ORDER BY identifier`), id, rule)
	if err != nil {
		return nil, fmt.Errorf("list overrides: %w", err)
	}
	return collect(rows, scanOverride, "list overrides")
}

// DeleteOverride deletes the rule's override of identifier (a pattern
// included, '*' and all), or returns ErrNotFound.
func (db *DB) DeleteOverride(ctx context.Context, clientID, rule, identifier string) (err error) {
	ctx, end := db.begin(ctx, "delete_override")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return fmt.Errorf("override %q: %w", identifier, ErrNotFound)
	}
	return db.deleteOne(ctx, id, `DELETE FROM rule_overrides WHERE client_id = ? AND rule_name = ? AND identifier = ?`,
		fmt.Sprintf("override %q of rule %q", identifier, rule), id, rule, identifier)
}
