package descriptors

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
	// MAX_RESERVATION_TTL). Optional; 0 means DefaultMaxReservationTTL.
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

// Load parses and checks every source and builds one Config from them, in
// order. It checks the whole configuration before returning: the error
// joins every problem found (each a *ConfigError naming its source and,
// when known, the line), file by file in the order of srcs and by line
// within a file, and no Config is returned unless there is none. A file
// with problems is still checked against itself and the other files
// (duplicate descriptors, a domain in two files), as far as it could be
// read.
func Load(opts Options, srcs ...Source) (*Config, error) {
	c, _, err := load(opts, srcs)
	return c, err
}

// load is Load, also returning the File of each source as parse returns it,
// in the order of srcs, for the domain each names.
func load(opts Options, srcs []Source) (*Config, []*File, error) {
	var (
		files    = make([]*File, len(srcs))
		problems = make([][]*ConfigError, len(srcs))
		b        = builder{opts: opts, config: &Config{domains: map[string]*Domain{}}, problems: problems}
	)
	for i, s := range srcs {
		f, unreadable, err := parse(s.Name, s.Data, opts)
		files[i] = f
		problems[i] = configErrors(err)
		if f.Domain != "" {
			b.file(i, f, unreadable)
		}
	}
	var errs []error
	for _, ps := range problems {
		slices.SortStableFunc(ps, func(x, y *ConfigError) int { return cmp.Compare(x.Line, y.Line) })
		for _, p := range ps {
			errs = append(errs, p)
		}
	}
	if len(errs) > 0 {
		return nil, files, errors.Join(errs...)
	}
	return b.config, files, nil
}

// builder builds a Config from files parse read, in order, refusing what
// only shows across files and levels: a domain in two files (unless
// opts.MergeDomains) and duplicate descriptors. parse has checked
// everything else.
type builder struct {
	opts     Options
	config   *Config
	problems [][]*ConfigError // by file index
}

// file adds the i-th file, f, whose descriptors at the places in
// unreadable have a key or value parse could not read.
func (b *builder) file(i int, f *File, unreadable map[string]bool) {
	d := b.config.domains[f.Domain]
	if d == nil {
		d = &Domain{name: f.Domain}
		b.config.domains[f.Domain] = d
	} else if !b.opts.MergeDomains {
		b.problems[i] = append(b.problems[i], &ConfigError{File: f.Name, Line: f.Line, Msg: fmt.Sprintf("duplicate domain '%s' in config file", f.Domain)})
		return
	}
	fb := fileBuilder{builder: b, domain: d, index: i, name: f.Name, unreadable: unreadable}
	fb.add(&d.root, f.Domain, f.Descriptors, domainPlace(f.Domain, f.Line))
}

// fileBuilder adds the descriptors of one file.
type fileBuilder struct {
	*builder
	domain     *Domain
	index      int
	name       string
	unreadable map[string]bool
}

func (b fileBuilder) add(lvl *level, parentKey string, ds []Descriptor, at place) {
	for i, d := range ds {
		dat := at.in(fmt.Sprintf("descriptors[%d]", i), d.Line)
		s := d.spec()
		fullKey := parentKey + "." + s.segment()
		if b.unreadable[dat.String()] {
			// Its children are still checked against each other.
			b.add(&level{}, fullKey, d.Descriptors, dat)
			continue
		}
		if lvl.find(d.Key, d.Value) != nil {
			b.problems[b.index] = append(b.problems[b.index], dat.problem(b.name, fmt.Sprintf("duplicate descriptor composite key '%s'", fullKey)))
			continue
		}
		n := lvl.add(s, fullKey)
		b.domain.noteHandles(s.limits)
		b.add(&n.children, fullKey, d.Descriptors, dat)
	}
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
