package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
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
		algorithm string
	)
	dest := append([]any{&c.ID, &c.Name, &c.Email, &c.Domain, &algorithm, timeScanner{&c.CreatedAt}}, extra...)
	err := row.Scan(dest...)
	c.DefaultAlgorithm = algorithms.Algorithm(algorithm)
	return c, err
}

// CreateClient registers c with the SHA-256 hash of its API key and returns it
// with ID, Domain, DefaultAlgorithm and CreatedAt set.
//
// The email is stored lower-case and must be unused (ErrConflict naming
// "email"). Without a Domain, the domain is a slug of the name, suffixed
// "-2", "-3", … when taken; a Domain given explicitly must be unused
// (ErrConflict naming "domain").
func (db *DB) CreateClient(ctx context.Context, c Client, keyHash [32]byte) (_ Client, err error) {
	ctx, end := db.begin(ctx, "create_client")
	defer end(&err)
	c, err = normalizeClient(c)
	if err != nil {
		return Client{}, err
	}
	explicit := c.Domain != ""
	c.ID = uuid.NewString()
	c.CreatedAt = db.timestamp()

	const attempts = 5
	for attempt := 1; ; attempt++ {
		if !explicit {
			if c.Domain, err = db.freeDomain(ctx, slug(c.Name)); err != nil {
				return Client{}, err
			}
		}
		err = db.insertClient(ctx, c, keyHash)
		if err == nil {
			return c, nil
		}
		kind, what := classify(err)
		if kind != uniqueViolation {
			return Client{}, fmt.Errorf("create client: %w", err)
		}
		switch {
		case strings.Contains(what, "email"):
			return Client{}, fmt.Errorf("email %q: %w", c.Email, ErrConflict)
		case strings.Contains(what, "api_key_hash"):
			return Client{}, fmt.Errorf("api key: %w", ErrConflict)
		case strings.Contains(what, "domain") && (explicit || attempt == attempts):
			return Client{}, fmt.Errorf("domain %q: %w", c.Domain, ErrConflict)
		case strings.Contains(what, "domain"):
			continue // another client took the slug meanwhile: pick again
		default:
			// The id: a UUID v4 collision, practically impossible; try a new one.
			if attempt == attempts {
				return Client{}, fmt.Errorf("create client: %w", ErrConflict)
			}
			c.ID = uuid.NewString()
		}
	}
}

func (db *DB) insertClient(ctx context.Context, c Client, keyHash [32]byte) error {
	return db.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, db.q(`INSERT INTO clients
			(id, name, email, domain, default_algorithm, api_key_hash, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`),
			c.ID, c.Name, c.Email, c.Domain, string(c.DefaultAlgorithm), keyHash[:], c.CreatedAt)
		if err != nil {
			return err
		}
		return db.bumpRevision(ctx, tx)
	})
}

// freeDomain returns base, or base-N with the smallest N ≥ 2 that no client
// uses.
func (db *DB) freeDomain(ctx context.Context, base string) (string, error) {
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT domain FROM clients WHERE domain = ? OR domain LIKE ?`), base, base+"-%")
	if err != nil {
		return "", fmt.Errorf("look up domains: %w", err)
	}
	defer rows.Close()
	taken := map[int]bool{}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return "", fmt.Errorf("look up domains: %w", err)
		}
		if d == base {
			taken[1] = true
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(d, base+"-")); err == nil {
			taken[n] = true
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("look up domains: %w", err)
	}
	if !taken[1] {
		return base, nil
	}
	n := 2
	for taken[n] {
		n++
	}
	return base + "-" + strconv.Itoa(n), nil
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
