package descriptors

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
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
	srcs, err := readDir(r.dir)
	if err != nil {
		r.seen = [sha256.Size]byte{} // reload whatever comes back
		r.failed(err)
		return false, err
	}
	sum := hashSources(srcs)
	if sum == r.seen && r.current.Load() != nil {
		return false, nil
	}
	first := r.current.Load() == nil
	c, err := Load(r.opts, srcs...)
	r.seen = sum // a bad edit is reported once, not at every poll
	if err != nil {
		r.failed(err)
		return false, err
	}
	r.current.Store(c)
	r.lastErr = ""
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
