package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/throttle-rl/throttle/algorithms"
)

const clientColumns = `id, name, email, domain, default_algorithm, created_at`

type rowScanner interface {
	Scan(dest ...any) error
}

func scanClient(row rowScanner, extra ...any) (Client, error) {
	var (
		c         Client
		domain    sql.NullString
		algorithm string
	)
	dest := append([]any{&c.ID, &c.Name, &c.Email, &domain, &algorithm, timeScanner{&c.CreatedAt}}, extra...)
	err := row.Scan(dest...)
	c.Domain, c.DefaultAlgorithm = domain.String, algorithms.Algorithm(algorithm)
	return c, err
}

// nullable is s for a column where "" is stored as NULL (a client without
// a domain).
func nullable(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// CreateClient registers c with the SHA-256 hash of its API key and returns it
// with ID, DefaultAlgorithm and CreatedAt set.
//
// The email is stored lower-case; several clients may share one (an email
// is a contact, not an account). A client has the Domain it is given, which
// must be unused (ErrConflict naming "domain"), or none: whether a client
// may have a domain is the caller's to decide (the operator grants them).
func (db *DB) CreateClient(ctx context.Context, c Client, keyHash [32]byte) (_ Client, err error) {
	ctx, end := db.begin(ctx, "create_client")
	defer end(&err)
	c, err = normalizeClient(c)
	if err != nil {
		return Client{}, err
	}
	c.CreatedAt = db.timestamp()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c.ID = uuid.NewString()
		err = db.insertClient(ctx, c, keyHash)
		if err == nil {
			return c, nil
		}
		kind, what := classify(err)
		var qe *QuotaError
		switch {
		case errors.As(err, &qe):
			return Client{}, err
		case kind != uniqueViolation:
			return Client{}, fmt.Errorf("create client: %w", err)
		case strings.Contains(what, "domain"):
			return Client{}, fmt.Errorf("domain %q: %w", c.Domain, ErrConflict)
		case strings.Contains(what, "api_key_hash"):
			return Client{}, fmt.Errorf("api key: %w", ErrConflict)
		case attempt == attempts:
			return Client{}, fmt.Errorf("create client: %w", ErrConflict)
		}
		// The id: a UUID v4 collision, practically impossible; try a new one.
	}
}

func (db *DB) insertClient(ctx context.Context, c Client, keyHash [32]byte) error {
	return db.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := db.checkClients(ctx, tx, db.quotas.Clients); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, db.q(`INSERT INTO clients
			(id, name, email, domain, default_algorithm, api_key_hash, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`),
			c.ID, c.Name, c.Email, nullable(c.Domain), string(c.DefaultAlgorithm), keyHash[:], c.CreatedAt)
		if err != nil {
			return err
		}
		return db.bumpRevision(ctx, tx, c.ID)
	})
}

// ReleaseDomain takes domain from the client that has it, which then has
// none (its rules, exemptions, keys and counters stay), and returns that
// client; ErrNotFound when no client has it.
func (db *DB) ReleaseDomain(ctx context.Context, domain string) (_ Client, err error) {
	ctx, end := db.begin(ctx, "release_domain")
	defer end(&err)
	var c Client
	err = db.inTx(ctx, nil, func(tx *sql.Tx) error {
		c, err = scanClient(tx.QueryRowContext(ctx, db.q(`UPDATE clients SET domain = NULL WHERE domain = ? RETURNING `+clientColumns), domain))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("domain %q: %w", domain, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("release domain %q: %w", domain, err)
		}
		return db.bumpRevision(ctx, tx, c.ID)
	})
	if err != nil {
		return Client{}, err
	}
	return c, nil
}

// ClientByKeyHash returns the client whose API key hashes to keyHash.
func (db *DB) ClientByKeyHash(ctx context.Context, keyHash [32]byte) (_ Client, err error) {
	ctx, end := db.begin(ctx, "client_by_key_hash")
	defer end(&err)
	row := db.sql.QueryRowContext(ctx, db.q(`SELECT `+clientColumns+` FROM clients WHERE api_key_hash = ?`), keyHash[:])
	c, err := scanClient(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Client{}, fmt.Errorf("client: %w", ErrNotFound)
	}
	if err != nil {
		return Client{}, fmt.Errorf("client by key: %w", err)
	}
	return c, nil
}

// ClientByID returns the client with id; an id that is not a UUID is
// ErrNotFound too.
func (db *DB) ClientByID(ctx context.Context, id string) (_ Client, err error) {
	ctx, end := db.begin(ctx, "client_by_id")
	defer end(&err)
	u, err := uuid.Parse(id)
	if err != nil {
		return Client{}, fmt.Errorf("client %q: %w", id, ErrNotFound)
	}
	row := db.sql.QueryRowContext(ctx, db.q(`SELECT `+clientColumns+` FROM clients WHERE id = ?`), u.String())
	c, err := scanClient(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Client{}, fmt.Errorf("client %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Client{}, fmt.Errorf("client by id: %w", err)
	}
	return c, nil
}

// clientUUID canonicalises a client id for queries; ok is false when id is
// not a UUID (so no row can match).
func clientUUID(id string) (string, bool) {
	u, err := uuid.Parse(id)
	if err != nil {
		return "", false
	}
	return u.String(), true
}
