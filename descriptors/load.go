package descriptors

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Options changes how files combine into one Config.
type Options struct {
	// MergeDomains lets several files describe one domain, their descriptors
	// merged (upstream's MERGE_DOMAIN_CONFIG). Optional; by default a domain
	// in two files is an error.
	MergeDomains bool
	// Tree reads a folder as the reference service reads its runtime
	// folder (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY): every
	// file at any depth, whatever its name, in path order, symlinks to
	// files followed and to folders not. Optional; by default a folder is
	// its *.yaml and *.yml files, not its subfolders.
	Tree bool
	// TreeDotFiles keeps, under Tree, files and folders whose names start
	// with '.' (the reference's RUNTIME_IGNOREDOTFILES=false, its
	// default). Those starting with ".." are skipped whatever this says:
	// they are a Kubernetes ConfigMap volume's own (..data and the
	// timestamped folder it points to), which hold the same files again.
	TreeDotFiles bool
	// OnLoad, when set, is told of every load a Reloader attempts: nil
	// for a configuration that loaded and is now in use, the error for
	// one that did not (once per distinct error, as it is logged and
	// counted). It feeds the reference service's config_load_success and
	// config_load_error. It is called with the Reloader's lock held: it
	// must not call Reload. Load and LoadFiles do not call it.
	OnLoad func(error)
	// MaxReservationTTL bounds a reservation's ttl (setting
	// MAX_RESERVATION_TTL). Optional; 0 means algorithms.DefaultMaxHoldTTL.
	MaxReservationTTL time.Duration
	// GlobalScope says the server keeps limits of scope global: it has a
	// global Redis (GLOBAL_REDIS_URL). Optional; by default a limit with
	// scope: global is an error that names GLOBAL_REDIS_URL.
	GlobalScope bool
}

// Source is the content of one configuration file and the name errors use.
type Source struct {
	Name string
	Data []byte
}

// Load reads every source as a File (Parse) and builds one Config from
// them, in order, as Build does. It checks the whole configuration before
// returning: the error joins every problem found (each a *ConfigError
// naming its source and, when known, the line), file by file in the order
// of srcs and by line within a file, and no Config is returned unless
// there is none. A file with problems is still checked against itself and
// the other files (duplicate descriptors, a domain in two files), as far
// as it could be read.
func Load(opts Options, srcs ...Source) (*Config, error) {
	c, _, err := load(opts, srcs)
	return c, err
}

// load is Load, also returning the File of each source as readYAML
// returns it, in the order of srcs, for the domain each names.
func load(opts Options, srcs []Source) (*Config, []*File, error) {
	files := make([]*File, len(srcs))
	b := newBuilder(opts, len(srcs))
	for i, s := range srcs {
		f, problems, gaps := readYAML(s.Name, s.Data)
		files[i], b.problems[i] = f, problems
		b.file(i, f, gaps)
	}
	c, err := b.result()
	return c, files, err
}

// LoadFiles loads the files at paths into one Config, as Load; errors name
// each file by its path. A directory among paths stands for the files
// LoadDir reads in it.
func LoadFiles(opts Options, paths ...string) (*Config, error) {
	srcs, err := readFiles(paths)
	if err != nil {
		return nil, err
	}
	return Load(opts, srcs...)
}

// readFiles reads the files at paths, and those of each directory among
// them (readDir), in order; it returns what it could read and an error for
// each path it could not.
func readFiles(paths []string) ([]Source, error) {
	var errs []error
	srcs := make([]Source, 0, len(paths))
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			dir, err := readDir(p, Options{})
			errs = append(errs, err)
			srcs = append(srcs, dir...)
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err) // *PathError names the file
			continue
		}
		srcs = append(srcs, Source{Name: p, Data: data})
	}
	return srcs, errors.Join(errs...)
}

// Check loads the files at paths as LoadFiles does (a directory as
// DESCRIPTORS_DIR is read) and returns how many files it read and every
// problem, or nil when the configuration is valid: what `throttle config
// check FILE|DIR…` reports ("file:line: path: message" each). Unlike
// LoadFiles, it also checks the files it can read when others cannot be
// read.
func Check(opts Options, paths ...string) (files int, err error) {
	srcs, err := readFiles(paths)
	_, lerr := Load(opts, srcs...)
	return len(srcs), errors.Join(err, lerr)
}

// LoadDir loads every *.yaml and *.yml file directly in dir (not in
// subdirectories), in name order, as Load; errors name each file by its
// path. Hidden names (starting with '.') are skipped, and so are the
// "..data" directories and symlinks a Kubernetes ConfigMap volume holds;
// the visible symlinks to its files are followed.
func LoadDir(dir string, opts Options) (*Config, error) {
	srcs, err := readDir(dir, opts)
	if err != nil {
		return nil, err
	}
	return Load(opts, srcs...)
}

// readDir reads the configuration files of dir, in name order: those
// opts.Tree says, else the *.yaml and *.yml files directly in it.
func readDir(dir string, opts Options) ([]Source, error) {
	if opts.Tree {
		return readTree(dir, opts.TreeDotFiles)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read descriptors directory: %w", err)
	}
	var srcs []Source
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p) // follows symlinks
		if err != nil {
			return nil, fmt.Errorf("read descriptors directory: %w", err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read descriptors directory: %w", err)
		}
		srcs = append(srcs, Source{Name: p, Data: data})
	}
	return srcs, nil
}

// readTree reads every file under dir, at any depth, in path order (Options.Tree).
func readTree(dir string, dotFiles bool) ([]Source, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("read descriptors directory: %w", err)
	}
	var srcs []Source
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		hidden := p != dir && (strings.HasPrefix(name, "..") || (!dotFiles && strings.HasPrefix(name, ".")))
		switch {
		case hidden && e.IsDir():
			return filepath.SkipDir
		case hidden || e.IsDir():
			return nil
		}
		fi, err := os.Stat(p) // follows a symlink
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil // a dangling symlink (mid-swap): skipped, as the reference skips it
		case err != nil || !fi.Mode().IsRegular():
			return err // a symlink to a folder is not walked, as the reference's
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		srcs = append(srcs, Source{Name: p, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read descriptors directory: %w", err)
	}
	return srcs, nil
}
