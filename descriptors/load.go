package descriptors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Options changes how files combine into one Config.
type Options struct {
	// MergeDomains lets several files describe one domain, their descriptors
	// merged (upstream's MERGE_DOMAIN_CONFIG). Optional; by default a domain
	// in two files is an error.
	MergeDomains bool
}

// Source is the content of one configuration file and the name errors use.
type Source struct {
	Name string
	Data []byte
}

// Load parses and checks every source and builds one Config from them, in
// order. It checks the whole configuration before returning: the error
// joins every problem found (each a *ConfigError naming its source and,
// when known, the line), and no Config is returned unless there is none.
func Load(opts Options, srcs ...Source) (*Config, error) {
	c, _, err := load(opts, srcs)
	return c, err
}

// load is Load, also returning the File of each source as parse returns it,
// in the order of srcs, for the domain each names.
func load(opts Options, srcs []Source) (*Config, []*File, error) {
	var (
		errs  []error
		files = make([]*File, len(srcs))
		good  []*File
	)
	for i, s := range srcs {
		f, err := parse(s.Name, s.Data)
		files[i] = f
		if err != nil {
			errs = append(errs, err)
			continue
		}
		good = append(good, f)
	}
	c, err := build(opts, good)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, files, errors.Join(errs...)
	}
	return c, files, nil
}

// build builds a Config from files Parse returned, in order, refusing what
// only shows across files and levels: a domain in two files (unless
// opts.MergeDomains) and duplicate descriptors. Parse has checked everything
// else. Errors are joined *ConfigError values.
func build(opts Options, files []*File) (*Config, error) {
	c := &Config{domains: map[string]*Domain{}}
	var errs []error
	for _, f := range files {
		d := c.domains[f.Domain]
		if d == nil {
			d = &Domain{name: f.Domain}
			c.domains[f.Domain] = d
		} else if !opts.MergeDomains {
			errs = append(errs, &ConfigError{File: f.Name, Line: f.Line, Msg: fmt.Sprintf("duplicate domain '%s' in config file", f.Domain)})
			continue
		}
		b := builder{file: f.Name}
		b.add(&d.root, f.Domain, f.Descriptors, domainPlace(f.Domain, f.Line))
		errs = append(errs, b.errs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

type builder struct {
	file string
	errs []error
}

func (b *builder) add(lvl *level, parentKey string, ds []Descriptor, at place) {
	for i, d := range ds {
		dat := at.in(fmt.Sprintf("descriptors[%d]", i), d.Line)
		s := d.spec()
		fullKey := parentKey + "." + s.segment()
		if lvl.find(d.Key, d.Value) != nil {
			b.errs = append(b.errs, dat.problem(b.file, fmt.Sprintf("duplicate descriptor composite key '%s'", fullKey)))
			continue
		}
		n := lvl.add(s, fullKey)
		b.add(&n.children, fullKey, d.Descriptors, dat)
	}
}

// LoadFiles loads the files at paths into one Config, as Load; errors name
// each file by its path.
func LoadFiles(opts Options, paths ...string) (*Config, error) {
	srcs, err := readFiles(paths)
	if err != nil {
		return nil, err
	}
	return Load(opts, srcs...)
}

func readFiles(paths []string) ([]Source, error) {
	var errs []error
	srcs := make([]Source, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err) // *PathError names the file
			continue
		}
		srcs = append(srcs, Source{Name: p, Data: data})
	}
	return srcs, errors.Join(errs...)
}

// Check loads the files at paths as LoadFiles does and returns every
// problem, or nil when the configuration is valid: what `throttle config
// check FILE…` reports ("file:line: path: message" each). Unlike LoadFiles,
// it also checks the files it can read when others cannot be read.
func Check(opts Options, paths ...string) error {
	srcs, err := readFiles(paths)
	_, lerr := Load(opts, srcs...)
	return errors.Join(err, lerr)
}

// LoadDir loads every *.yaml and *.yml file directly in dir (not in
// subdirectories), in name order, as Load; errors name each file by its
// path. Hidden names (starting with '.') are skipped, and so are the
// "..data" directories and symlinks a Kubernetes ConfigMap volume holds;
// the visible symlinks to its files are followed.
func LoadDir(dir string, opts Options) (*Config, error) {
	srcs, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	return Load(opts, srcs...)
}

// readDir reads the configuration files of dir, in name order.
func readDir(dir string) ([]Source, error) {
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
