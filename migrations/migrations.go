// Package migrations holds Throttle's SQL schema, one folder per SQL dialect,
// embedded in the binary and applied with golang-migrate (source iofs).
//
// Files are named NNNN_title.up.sql / NNNN_title.down.sql; both dialects carry
// the same versions so `throttle migrate version` means the same thing on
// either database.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Postgres returns the PostgreSQL migrations (the folder's contents, at its root).
func Postgres() fs.FS { return sub("postgres") }

// SQLite returns the SQLite migrations (the folder's contents, at its root).
func SQLite() fs.FS { return sub("sqlite") }

// FS returns both dialect folders, "postgres" and "sqlite".
func FS() fs.FS { return files }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		// fs.Sub fails only for an invalid path name; dir is a constant.
		return files
	}
	return f
}
