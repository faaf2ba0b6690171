package descriptors

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reloader follows a directory of descriptor files: it polls the files'
// names and contents and, when they change, loads them whole and swaps the
// new Config in. A configuration that fails to load is logged and counted,
// and the last good Config stays in use. Polling (not inotify) is what
// follows a Kubernetes ConfigMap reliably, whose update is a swap of
// symlinked directories.
type Reloader struct {
	dir   string
	every time.Duration
	opts  Options
	log   *slog.Logger
	now   func() time.Time

	current atomic.Pointer[Config]
	state   atomic.Pointer[reloadState]
	mu      sync.Mutex // serialises Reload
	seen    [sha256.Size]byte
	lastErr string // the last failure reported, so a poll does not repeat it
	waiting bool   // started without a configuration: log failures before the first load

	loadErrors prometheus.Counter
	valid      prometheus.Gauge
	lastReload prometheus.Gauge
}

// NewReloader loads dir (as LoadDir) and returns a Reloader that polls it
// every interval once Run is called. It fails when the first load fails, so
// a bad configuration stops a server from starting rather than serving
// without limits. Its metrics are registered with reg:
// throttle_descriptors_config_load_errors_total,
// throttle_descriptors_config_valid (1 when the files on disk are in use,
// 0 while a bad edit is kept out) and
// throttle_descriptors_config_last_reload_timestamp_seconds.
func NewReloader(dir string, every time.Duration, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Reloader, error) {
	r, err := newReloader(dir, every, opts, log, reg)
	if err != nil {
		return nil, err
	}
	if _, err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// NewReloaderWithoutInitialConfig is NewReloader for a server that starts
// before its configuration is there (the reference service's
// FORCE_START_WITHOUT_INITIAL_CONFIG=true): it returns even when the first
// load fails, because dir is missing or its files do not load. That failure
// is logged (once per distinct error) and counted, Current returns nil until
// a load succeeds, and Run keeps polling, so the configuration is picked up
// when it appears.
func NewReloaderWithoutInitialConfig(dir string, every time.Duration, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Reloader, error) {
	r, err := newReloader(dir, every, opts, log, reg)
	if err != nil {
		return nil, err
	}
	r.waiting = true
	_, _ = r.Reload() // logged and counted by Reload
	return r, nil
}

func newReloader(dir string, every time.Duration, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Reloader, error) {
	if every <= 0 {
		return nil, fmt.Errorf("descriptors reload interval %s must be positive", every)
	}
	r := &Reloader{
		dir:   dir,
		every: every,
		opts:  opts,
		log:   log,
		now:   time.Now,
		loadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_descriptors_config_load_errors_total",
			Help: "Descriptor configuration loads that failed; the last good configuration stayed in use.",
		}),
		valid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_descriptors_config_valid",
			Help: "1 when the descriptor files on disk loaded and are in use, 0 when they failed to load.",
		}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_descriptors_config_last_reload_timestamp_seconds",
			Help: "Unix time of the last successful descriptor configuration load.",
		}),
	}
	for _, c := range []prometheus.Collector{r.loadErrors, r.valid, r.lastReload} {
		if reg == nil {
			break // nil: not registered, as everywhere
		}
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register descriptors metrics: %w", err)
		}
	}
	return r, nil
}

// Current returns the last configuration that loaded. It is never nil after
// NewReloader succeeded; after NewReloaderWithoutInitialConfig it is nil
// until the first load succeeds.
func (r *Reloader) Current() *Config { return r.current.Load() }

// Reload reads the directory now and, if its files changed since the last
// read, loads them. It reports whether a new Config was swapped in; the
// error says why the files on disk are not in use (they are also logged
// and counted). Run calls it every interval; tests and a SIGHUP handler may
// call it directly.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	srcs, err := readDir(r.dir, r.opts)
	if err != nil {
		r.seen = [sha256.Size]byte{} // reload whatever comes back
		r.setState(now, nil, &loadFailure{})
		r.failed(err)
		return false, err
	}
	sum := hashSources(srcs)
	if sum == r.seen && r.current.Load() != nil {
		r.setState(now, nil, nil)
		return false, nil
	}
	first := r.current.Load() == nil
	c, files, err := load(r.opts, srcs)
	r.seen = sum // a bad edit is reported once, not at every poll
	if err != nil {
		r.setState(now, nil, r.failure(err, files))
		r.failed(err)
		return false, err
	}
	r.setState(now, &loaded{at: now, files: filesByDomain(srcs, files)}, nil)
	r.current.Store(c)
	r.lastErr = ""
	if r.opts.OnLoad != nil {
		r.opts.OnLoad(nil)
	}
	r.valid.Set(1)
	r.lastReload.Set(float64(r.now().UnixNano()) / 1e9)
	if first {
		r.log.Info("descriptors loaded", "dir", r.dir, "files", len(srcs), "domains", c.DomainCount())
	} else {
		r.log.Info("descriptors reloaded", "dir", r.dir, "files", len(srcs), "domains", c.DomainCount())
	}
	return true, nil
}

func (r *Reloader) failed(err error) {
	if err.Error() == r.lastErr {
		return
	}
	r.lastErr = err.Error()
	r.loadErrors.Inc()
	if r.opts.OnLoad != nil {
		r.opts.OnLoad(err)
	}
	r.valid.Set(0)
	switch {
	case r.current.Load() != nil:
		r.log.Error("descriptors not reloaded; keeping the last good configuration", "dir", r.dir, "err", err)
	case r.waiting:
		r.log.Error("descriptors not loaded; serving without them until they load", "dir", r.dir, "err", err)
	}
}

// Run polls the directory every interval until ctx ends, then returns nil.
func (r *Reloader) Run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_, _ = r.Reload() // logged and counted by Reload
		}
	}
}

// hashSources hashes the names and contents, length-prefixed so no two
// different sets of files hash alike by concatenation.
func hashSources(srcs []Source) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, s := range srcs {
		for _, b := range [][]byte{[]byte(s.Name), s.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// DomainStatus is what a Reloader reports about one domain: the files in use
// for it and whether the directory's latest files loaded.
type DomainStatus struct {
	// Files are the files of the configuration in use that describe the
	// domain, by name (the file's base name, not its path); none when the
	// YAML does not describe the domain.
	Files []Source
	// LoadedAt is when the configuration in use was loaded.
	LoadedAt time.Time
	// CheckedAt is when the directory was last read.
	CheckedAt time.Time
	// Valid reports whether the files on disk are the ones in use. It is
	// false while a bad edit of any file is kept out, since a configuration
	// loads whole or not at all.
	Valid bool
	// Problems are those of the files on disk that describe the domain (by
	// the domain they name, or the file's name in the configuration in
	// use), each "file:line: path: message" with the file's base name. An
	// invalid configuration without problems of this domain is another
	// domain's, or the directory's (which the log names).
	Problems []string
}

// DomainStatus reports on domain, for the operators of that domain only: no
// file or problem of another domain is in it.
func (r *Reloader) DomainStatus(domain string) DomainStatus {
	st := r.state.Load()
	if st == nil {
		return DomainStatus{}
	}
	ds := DomainStatus{CheckedAt: st.checkedAt, Valid: st.failure == nil}
	if st.loaded != nil {
		ds.LoadedAt = st.loaded.at
		ds.Files = slices.Clone(st.loaded.files[domain])
	}
	if st.failure != nil {
		ds.Problems = slices.Clone(st.failure.problems[domain])
	}
	return ds
}

// reloadState is what DomainStatus reads: replaced whole at every Reload.
type reloadState struct {
	checkedAt time.Time
	loaded    *loaded      // the configuration in use
	failure   *loadFailure // nil when the files on disk are in use
}

type loaded struct {
	at    time.Time
	files map[string][]Source // by domain, base names
}

type loadFailure struct {
	problems map[string][]string // by domain
}

// setState records a poll at now. A nil l keeps the configuration in use; a
// nil f says the files on disk are in use, unless l is nil and a failure is
// on record: the same bad files are still there.
func (r *Reloader) setState(now time.Time, l *loaded, f *loadFailure) {
	next := reloadState{checkedAt: now, loaded: l, failure: f}
	if prev := r.state.Load(); prev != nil {
		if l == nil {
			next.loaded = prev.loaded
			if f == nil {
				next.failure = prev.failure
			}
		}
	}
	r.state.Store(&next)
}

// failure sorts the problems of err (joined *ConfigError values) by the
// domain of the file each is in: the domain the file on disk names (files,
// as load read them), or else the one its namesake in the configuration in
// use describes.
func (r *Reloader) failure(err error, files []*File) *loadFailure {
	domainOf := map[string]string{}
	if st := r.state.Load(); st != nil && st.loaded != nil {
		for d, srcs := range st.loaded.files {
			for _, s := range srcs {
				domainOf[s.Name] = d
			}
		}
	}
	for _, f := range files {
		if f.Domain != "" {
			domainOf[filepath.Base(f.Name)] = f.Domain
		}
	}
	f := &loadFailure{problems: map[string][]string{}}
	for _, ce := range configErrors(err) {
		ce := *ce
		ce.File = filepath.Base(ce.File)
		if d, ok := domainOf[ce.File]; ok {
			f.problems[d] = append(f.problems[d], ce.Error())
		}
	}
	return f
}

// configErrors lists the *ConfigError values in err, a tree of joined errors.
func configErrors(err error) []*ConfigError {
	var out []*ConfigError
	var visit func(error)
	visit = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				visit(e)
			}
			return
		}
		var ce *ConfigError
		if errors.As(err, &ce) {
			out = append(out, ce)
		}
	}
	if err != nil {
		visit(err)
	}
	return out
}

// filesByDomain groups srcs (which loaded, as files) by the domain each
// describes, under their base names.
func filesByDomain(srcs []Source, files []*File) map[string][]Source {
	m := map[string][]Source{}
	for i, s := range srcs {
		d := files[i].Domain
		m[d] = append(m[d], Source{Name: filepath.Base(s.Name), Data: s.Data})
	}
	return m
}
