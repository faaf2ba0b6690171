package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/throttle-rl/throttle/migrations"
)

// Migrate runs one migration command against databaseURL and reports the
// schema version afterwards: "up" applies every pending migration, "down"
// reverts one step, "version" only reports. A dirty database (a migration
// failed half way) is reported as such, with an error, so an operator can
// repair it; Open refuses to start on one.
func Migrate(ctx context.Context, databaseURL string, cmd string) (version uint, dirty bool, err error) {
	dialect, target, err := parseURL(databaseURL)
	if err != nil {
		return 0, false, err
	}
	if target == memoryPath {
		return 0, false, fmt.Errorf("migrate: sqlite://:memory: is a database of the serving process alone, which migrates it when it starts: %w", ErrInvalid)
	}
	return migrateTarget(ctx, dialect, target, cmd)
}

// migrateTarget is Migrate on target, in dialect (as parseURL returns them).
func migrateTarget(ctx context.Context, dialect, target string, cmd string) (version uint, dirty bool, err error) {
	switch cmd {
	case "up", "down", "version":
	default:
		return 0, false, fmt.Errorf("migrate: command %q is not one of up, down, version: %w", cmd, ErrInvalid)
	}
	m, err := openMigrator(ctx, dialect, target)
	if err != nil {
		return 0, false, err
	}
	// m.Close closes the source and the driver, and the driver closes the
	// database.
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()

	// golang-migrate takes no context: stop it between migrations when ctx ends.
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()

	switch cmd {
	case "up":
		err = m.Up()
	case "down":
		err = m.Steps(-1)
	}
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err != nil {
		if cmd == "down" && errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("migrate down: no migration to revert, the schema is empty")
		} else {
			err = fmt.Errorf("migrate %s: %w", cmd, err)
		}
	}
	return schemaVersion(m, err)
}

// openMigrator connects to target and returns golang-migrate over it and
// the embedded migrations of its dialect.
func openMigrator(ctx context.Context, dialect, target string) (*migrate.Migrate, error) {
	sqlDB, err := openSQL(dialect, target, false)
	if err != nil {
		return nil, err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("migrate: connect to %s database: %w", dialect, err)
	}

	var (
		driver database.Driver
		source fs.FS
	)
	switch dialect {
	case DialectSQLite:
		source = migrations.SQLite()
		driver, err = sqlitemigrate.WithInstance(sqlDB, &sqlitemigrate.Config{})
	default:
		source = migrations.Postgres()
		driver, err = pgxmigrate.WithInstance(sqlDB, &pgxmigrate.Config{})
	}
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("migrate: prepare %s database: %w", dialect, err)
	}
	src, err := iofs.New(source, ".")
	if err != nil {
		driver.Close()
		return nil, fmt.Errorf("migrate: read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, dialect, driver)
	if err != nil {
		src.Close()
		driver.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return m, nil
}

// schemaVersion reports m's schema version after a command that ended with
// err; a dirty schema is an error of its own when the command had none.
func schemaVersion(m *migrate.Migrate, err error) (uint, bool, error) {
	v, dirty, verr := m.Version()
	if errors.Is(verr, migrate.ErrNilVersion) {
		return 0, false, err
	}
	if verr != nil && err == nil {
		err = fmt.Errorf("migrate: read schema version: %w", verr)
	}
	if dirty && err == nil {
		err = fmt.Errorf("migrate: schema version %d is dirty (a migration failed half way); repair the database, then force the version", v)
	}
	return v, dirty, err
}
