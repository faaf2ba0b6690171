package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ScopeCheck is the scope of a key that may only check (/check, /check/ip,
// /check/batch): the key a browser app embeds. A client's own key, made
// at registration, may do everything.
const ScopeCheck = "check"

// Key is an API key a client minted beside its own, with a scope. Only
// the SHA-256 hash of the secret is stored.
type Key struct {
	ID        string
	ClientID  string
	Scope     string
	CreatedAt time.Time
	keyHash   [32]byte
}

const keyColumns = `id, client_id, scope, key_hash, created_at`

func scanKey(row rowScanner) (Key, error) {
	var (
		k    Key
		hash []byte
	)
	err := row.Scan(&k.ID, &k.ClientID, &k.Scope, &hash, timeScanner{&k.CreatedAt})
	if err == nil && len(hash) != 32 {
		return Key{}, fmt.Errorf("key %s: hash has %d bytes, want 32", k.ID, len(hash))
	}
	copy(k.keyHash[:], hash)
	return k, err
}

// CreateKey stores a new key of clientID with scope (ScopeCheck) whose
// secret hashes to keyHash, and returns it. An unknown scope is ErrInvalid;
// a client at its quota of keys is a *QuotaError (ErrTooMany).
func (db *DB) CreateKey(ctx context.Context, clientID, scope string, keyHash [32]byte) (_ Key, err error) {
	ctx, end := db.begin(ctx, "create_key")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return Key{}, fmt.Errorf("client %q: %w", clientID, ErrNotFound)
	}
	if scope != ScopeCheck {
		return Key{}, fmt.Errorf("scope %q is not one of %q: %w", scope, []string{ScopeCheck}, ErrInvalid)
	}
	k := Key{ID: uuid.NewString(), ClientID: id, Scope: scope, CreatedAt: db.timestamp(), keyHash: keyHash}
	err = db.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := db.checkQuota(ctx, tx, id, "api_keys", "keys", db.quotas.Keys); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, db.q(`INSERT INTO api_keys (`+keyColumns+`) VALUES (?, ?, ?, ?, ?)`),
			k.ID, k.ClientID, k.Scope, keyHash[:], k.CreatedAt)
		if err != nil {
			return err
		}
		return db.bumpRevision(ctx, tx, id)
	})
	if err != nil {
		if errors.Is(err, ErrTooMany) {
			return Key{}, err
		}
		switch kind, _ := classify(err); kind {
		case uniqueViolation:
			return Key{}, fmt.Errorf("api key: %w", ErrConflict)
		case foreignKeyViolation:
			return Key{}, fmt.Errorf("client %q: %w", clientID, ErrNotFound)
		}
		return Key{}, fmt.Errorf("create key: %w", err)
	}
	return k, nil
}

// Keys returns the keys clientID minted, oldest first.
func (db *DB) Keys(ctx context.Context, clientID string) (_ []Key, err error) {
	ctx, end := db.begin(ctx, "keys")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return []Key{}, nil
	}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT `+keyColumns+` FROM api_keys WHERE client_id = ? ORDER BY created_at, id`), id)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return collect(rows, scanKey, "list keys")
}

// DeleteKey revokes the key keyID of clientID, or returns ErrNotFound.
func (db *DB) DeleteKey(ctx context.Context, clientID, keyID string) (err error) {
	ctx, end := db.begin(ctx, "delete_key")
	defer end(&err)
	id, ok := clientUUID(clientID)
	kid, kok := clientUUID(keyID) // a key id is a UUID too
	if !ok || !kok {
		return fmt.Errorf("key %q: %w", keyID, ErrNotFound)
	}
	return db.deleteOne(ctx, id, `DELETE FROM api_keys WHERE client_id = ? AND id = ?`, fmt.Sprintf("key %q", keyID), id, kid)
}
