package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

const exemptionColumns = `client_id, identifier, reason, created_at`

func scanExemption(row rowScanner) (Exemption, error) {
	var e Exemption
	err := row.Scan(&e.ClientID, &e.Identifier, &e.Reason, timeScanner{&e.CreatedAt})
	return e, err
}

// CreateExemption exempts e.Identifier of e.ClientID from rate limiting and
// returns e with CreatedAt set. An identifier already exempt is ErrConflict;
// an unknown client is ErrNotFound; a client at its quota of exemptions is
// a *QuotaError (ErrTooMany).
func (db *DB) CreateExemption(ctx context.Context, e Exemption) (_ Exemption, err error) {
	ctx, end := db.begin(ctx, "create_exemption")
	defer end(&err)
	clientID, ok := clientUUID(e.ClientID)
	if !ok {
		return Exemption{}, fmt.Errorf("client %q: %w", e.ClientID, ErrNotFound)
	}
	e.ClientID = clientID
	if err := checkExemption(e); err != nil {
		return Exemption{}, err
	}
	e.CreatedAt = db.timestamp()
	err = db.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := db.checkQuota(ctx, tx, e.ClientID, "exemptions", "exemptions", db.quotas.Exemptions); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, db.q(`INSERT INTO exemptions (client_id, identifier, reason, created_at)
			VALUES (?, ?, ?, ?)`), e.ClientID, e.Identifier, e.Reason, e.CreatedAt)
		if err != nil {
			return err
		}
		return db.bumpRevision(ctx, tx, e.ClientID)
	})
	if err != nil {
		if errors.Is(err, ErrTooMany) {
			return Exemption{}, err
		}
		switch kind, _ := classify(err); kind {
		case uniqueViolation:
			return Exemption{}, fmt.Errorf("exemption %q: %w", e.Identifier, ErrConflict)
		case foreignKeyViolation:
			return Exemption{}, fmt.Errorf("client %q: %w", e.ClientID, ErrNotFound)
		}
		return Exemption{}, fmt.Errorf("create exemption: %w", err)
	}
	return e, nil
}

// Exemptions returns the client's exemptions ordered by identifier.
func (db *DB) Exemptions(ctx context.Context, clientID string) (_ []Exemption, err error) {
	ctx, end := db.begin(ctx, "exemptions")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return []Exemption{}, nil
	}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT `+exemptionColumns+` FROM exemptions WHERE client_id = ? ORDER BY identifier`), id)
	if err != nil {
		return nil, fmt.Errorf("list exemptions: %w", err)
	}
	return collect(rows, scanExemption, "list exemptions")
}

// Exemption returns the client's exemption of identifier.
func (db *DB) Exemption(ctx context.Context, clientID, identifier string) (_ Exemption, err error) {
	ctx, end := db.begin(ctx, "exemption")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return Exemption{}, fmt.Errorf("exemption %q: %w", identifier, ErrNotFound)
	}
	e, err := scanExemption(db.sql.QueryRowContext(ctx, db.q(`SELECT `+exemptionColumns+` FROM exemptions WHERE client_id = ? AND identifier = ?`), id, identifier))
	if errors.Is(err, sql.ErrNoRows) {
		return Exemption{}, fmt.Errorf("exemption %q: %w", identifier, ErrNotFound)
	}
	if err != nil {
		return Exemption{}, fmt.Errorf("get exemption: %w", err)
	}
	return e, nil
}

// DeleteExemption removes the client's exemption of identifier, or returns
// ErrNotFound.
func (db *DB) DeleteExemption(ctx context.Context, clientID, identifier string) (err error) {
	ctx, end := db.begin(ctx, "delete_exemption")
	defer end(&err)
	id, ok := clientUUID(clientID)
	if !ok {
		return fmt.Errorf("exemption %q: %w", identifier, ErrNotFound)
	}
	return db.deleteOne(ctx, id, `DELETE FROM exemptions WHERE client_id = ? AND identifier = ?`, fmt.Sprintf("exemption %q", identifier), id, identifier)
}
