package descriptors

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// metric returns the value of the gauge or counter name in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestReloader(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, runtime+"config/basic.yaml", filepath.Join(dir, "basic.yaml"))
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	r, err := NewReloader(dir, 10*time.Millisecond, Options{}, log, reg)
	must(t, err)
	const (
		errorsTotal = "throttle_descriptors_config_load_errors_total"
		valid       = "throttle_descriptors_config_valid"
		lastReload  = "throttle_descriptors_config_last_reload_timestamp_seconds"
	)
	first := r.Current()
	if first.Domain("basic") == nil || metric(t, reg, valid) != 1 || metric(t, reg, lastReload) == 0 {
		t.Fatalf("first load: domain basic %v, valid %v", first.Domain("basic"), metric(t, reg, valid))
	}

	// Nothing changed: nothing reloads.
	if changed, err := r.Reload(); changed || err != nil || r.Current() != first {
		t.Errorf("Reload without change = %v, %v", changed, err)
	}

	// A good edit is picked up: upstream's reload test adds reload.yaml.
	copyFile(t, runtime+"reload.yaml", filepath.Join(dir, "reload.yaml"))
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload after a good edit = %v, %v", changed, err)
	}
	good := r.Current()
	if m := good.Match("reload", entries("block", "foo")); m == nil || !m.Limit.AlwaysOverLimit() {
		t.Errorf("reload/block: %+v, want always over limit", m)
	}

	// A bad edit is kept out, logged once and counted.
	writeFile(t, filepath.Join(dir, "basic.yaml"), "domain: basic\ndescriptors:\n  - key: key1\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if changed, err := r.Reload(); changed || err == nil {
		t.Fatalf("Reload after a bad edit = %v, %v", changed, err)
	}
	if r.Current() != good {
		t.Error("a bad edit replaced the configuration")
	}
	if got := metric(t, reg, valid); got != 0 {
		t.Errorf("valid after a bad edit = %v, want 0", got)
	}
	if got := metric(t, reg, errorsTotal); got != 1 {
		t.Errorf("load errors after a bad edit = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "invalid rate limit unit 'fortnight'") {
		t.Errorf("log does not say why:\n%s", logs.String())
	}
	if changed, err := r.Reload(); changed || err != nil || metric(t, reg, errorsTotal) != 1 {
		t.Errorf("second poll of the same bad edit = %v, %v, errors %v; want it reported once", changed, err, metric(t, reg, errorsTotal))
	}

	// Restoring the file brings it back; Run does the polling.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	copyFile(t, runtime+"config/basic.yaml", filepath.Join(dir, "basic.yaml"))
	must(t, os.Remove(filepath.Join(dir, "reload.yaml")))
	deadline := time.Now().Add(5 * time.Second)
	for r.Current() == good && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	c := r.Current()
	if c == good || c.Domain("basic") == nil || c.Domain("reload") != nil {
		t.Fatalf("after restore: basic %v, reload %v; want basic only", c.Domain("basic"), c.Domain("reload"))
	}
	if got := metric(t, reg, valid); got != 1 {
		t.Errorf("valid after restore = %v, want 1", got)
	}
}

func TestNewReloaderRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, upstream+"bad_limit_unit.yaml", filepath.Join(dir, "bad.yaml"))
	log := slog.New(slog.DiscardHandler)
	if _, err := NewReloader(dir, time.Second, Options{}, log, prometheus.NewRegistry()); err == nil {
		t.Error("NewReloader with a bad file: no error")
	}
	if _, err := NewReloader(t.TempDir(), 0, Options{}, log, prometheus.NewRegistry()); err == nil {
		t.Error("NewReloader with interval 0: no error")
	}
	r, err := NewReloader(t.TempDir(), time.Second, Options{}, log, prometheus.NewRegistry())
	if err != nil || r.Current() == nil || r.Current().DomainCount() != 0 {
		t.Errorf("NewReloader of an empty directory: %v, %v", r, err)
	}
}

func FuzzLoad(f *testing.F) {
	for _, p := range []string{
		upstream + "basic_config.yaml", upstream + "share_threshold.yaml", upstream + "wildcard.yaml",
		upstream + "non_string_key.yaml", upstream + "bad_yaml.yaml", examples + "example.yaml", ours + "nested_problems.yaml",
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "k", "v")
	}
	f.Add([]byte("domain: d\ndescriptors: [{key: k, value: '*a*', rate_limit: {unit: second, requests_per_unit: 1}}]"), "k", "xay")
	f.Add([]byte("a: &a [*a]"), "", "")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		c, err := Load(Options{}, Source{Name: "fuzz.yaml", Data: data})
		if err != nil {
			if c != nil {
				t.Fatal("Load returned a config and an error")
			}
			return
		}
		for name, d := range c.domains {
			for _, es := range [][]Entry{{{key, value}}, {{key, value}, {key, value}}} {
				if m := d.Match(es); m != nil {
					if m.Domain != name || m.Counter == "" || !strings.HasPrefix(m.StatsKey, name+".") {
						t.Fatalf("bad match %+v", m)
					}
					if !m.Limit.Unlimited && !m.Limit.AlwaysOverLimit() {
						if _, err := m.Limit.EngineLimit(); err != nil {
							t.Fatalf("loaded a limit the engine refuses: %v", err)
						}
					}
				}
			}
		}
	})
}

// TestReloaderDomainStatus: each domain sees its own files and problems,
// and that the configuration as a whole is kept out while any file is bad.
func TestReloaderDomainStatus(t *testing.T) {
	dir := t.TempDir()
	alpha := "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	beta := "domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 9}\n"
	writeFile(t, filepath.Join(dir, "a.yaml"), alpha)
	writeFile(t, filepath.Join(dir, "b.yaml"), beta)
	start := time.Now()
	r, err := NewReloader(dir, time.Hour, Options{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	must(t, err)
	first := r.DomainStatus("alpha")
	if first.LoadedAt.Before(start) || first.LoadedAt.After(time.Now()) || !first.CheckedAt.Equal(first.LoadedAt) {
		t.Errorf("first load at %v, checked at %v; want both about now", first.LoadedAt, first.CheckedAt)
	}
	loadedAt := first.LoadedAt
	at := func(sec int) time.Time { return loadedAt.Add(time.Duration(sec) * time.Second) }
	status := func(when, domain string, want DomainStatus) {
		t.Helper()
		if diff := cmp.Diff(want, r.DomainStatus(domain)); diff != "" {
			t.Errorf("%s: DomainStatus(%q) (-want +got):\n%s", when, domain, diff)
		}
	}
	alphaFiles := []Source{{Name: "a.yaml", Data: []byte(alpha)}}
	betaFiles := []Source{{Name: "b.yaml", Data: []byte(beta)}}
	status("first load", "alpha", DomainStatus{Files: alphaFiles, LoadedAt: loadedAt, CheckedAt: loadedAt, Valid: true})
	status("first load", "beta", DomainStatus{Files: betaFiles, LoadedAt: loadedAt, CheckedAt: loadedAt, Valid: true})
	status("first load", "gamma", DomainStatus{LoadedAt: loadedAt, CheckedAt: loadedAt, Valid: true})

	// A bad edit of beta's file: beta sees why, alpha only that it is held back.
	r.now = func() time.Time { return at(10) }
	writeFile(t, filepath.Join(dir, "b.yaml"), "domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if _, err := r.Reload(); err == nil {
		t.Fatal("Reload of a bad edit: no error")
	}
	badUnit := []string{`b.yaml:4: domain "beta" › descriptors[0] › rate_limit: invalid rate limit unit 'fortnight'`}
	status("bad edit", "beta", DomainStatus{Files: betaFiles, LoadedAt: loadedAt, CheckedAt: at(10), Problems: badUnit})
	status("bad edit", "alpha", DomainStatus{Files: alphaFiles, LoadedAt: loadedAt, CheckedAt: at(10)})

	// A poll of the same files keeps the problems and moves CheckedAt.
	r.now = func() time.Time { return at(20) }
	must(t, errorsOnly(r.Reload()))
	status("second poll", "beta", DomainStatus{Files: betaFiles, LoadedAt: loadedAt, CheckedAt: at(20), Problems: badUnit})

	// A file that is not YAML at all is still beta's: its name was beta's.
	r.now = func() time.Time { return at(30) }
	writeFile(t, filepath.Join(dir, "b.yaml"), "domain: beta\ndescriptors: [\n")
	if _, err := r.Reload(); err == nil {
		t.Fatal("Reload of broken YAML: no error")
	}
	if got := r.DomainStatus("beta"); len(got.Problems) != 1 || !strings.HasPrefix(got.Problems[0], "b.yaml") || got.Valid {
		t.Errorf("broken YAML: beta's status %+v, want one problem in b.yaml", got)
	}
	if got := r.DomainStatus("alpha"); len(got.Problems) != 0 || got.Valid {
		t.Errorf("broken YAML: alpha's status %+v, want invalid without problems", got)
	}

	// A new file that takes alpha's domain is alpha's problem.
	writeFile(t, filepath.Join(dir, "b.yaml"), beta)
	writeFile(t, filepath.Join(dir, "c.yaml"), alpha)
	if _, err := r.Reload(); err == nil {
		t.Fatal("Reload with alpha twice: no error")
	}
	status("duplicate domain", "alpha", DomainStatus{Files: alphaFiles, LoadedAt: loadedAt, CheckedAt: at(30),
		Problems: []string{"c.yaml:1: duplicate domain 'alpha' in config file"}})
	status("duplicate domain", "beta", DomainStatus{Files: betaFiles, LoadedAt: loadedAt, CheckedAt: at(30)})

	// Fixed: valid again, a new load time, the new files.
	r.now = func() time.Time { return at(40) }
	must(t, os.Remove(filepath.Join(dir, "c.yaml")))
	beta2 := strings.Replace(beta, "requests_per_unit: 9", "requests_per_unit: 90", 1)
	writeFile(t, filepath.Join(dir, "b.yaml"), beta2)
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload of the fix = %v, %v", changed, err)
	}
	status("fixed", "beta", DomainStatus{Files: []Source{{Name: "b.yaml", Data: []byte(beta2)}}, LoadedAt: at(40), CheckedAt: at(40), Valid: true})
	status("fixed", "alpha", DomainStatus{Files: alphaFiles, LoadedAt: at(40), CheckedAt: at(40), Valid: true})

	// The directory itself gone: invalid, no domain's problem, files kept.
	r.now = func() time.Time { return at(50) }
	must(t, os.RemoveAll(dir))
	if _, err := r.Reload(); err == nil {
		t.Fatal("Reload of a missing directory: no error")
	}
	status("no directory", "alpha", DomainStatus{Files: alphaFiles, LoadedAt: at(40), CheckedAt: at(50)})
}

// errorsOnly drops Reload's changed flag.
func errorsOnly(_ bool, err error) error { return err }

// TestReloaderWithoutInitialConfig: FORCE_START_WITHOUT_INITIAL_CONFIG. A
// missing directory, then a bad file, start a Reloader with no configuration;
// the first good load is picked up by Run.
func TestReloaderWithoutInitialConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	r, err := NewReloaderWithoutInitialConfig(dir, 5*time.Millisecond, Options{}, log, reg)
	must(t, err)
	if r.Current() != nil {
		t.Fatalf("Current() = %v before any load, want nil", r.Current())
	}
	if got := metric(t, reg, "throttle_descriptors_config_valid"); got != 0 {
		t.Errorf("valid = %v, want 0", got)
	}
	if got := metric(t, reg, "throttle_descriptors_config_load_errors_total"); got != 1 {
		t.Errorf("load errors = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "descriptors not loaded; serving without them until they load") {
		t.Errorf("log does not say it waits:\n%s", logs.String())
	}

	must(t, os.Mkdir(dir, 0o755))
	copyFile(t, upstream+"bad_limit_unit.yaml", filepath.Join(dir, "bad.yaml"))
	if changed, err := r.Reload(); changed || err == nil || r.Current() != nil {
		t.Fatalf("bad file: Reload() = %v, %v, Current %v; want false, an error, nil", changed, err, r.Current())
	}
	if !strings.Contains(logs.String(), "invalid rate limit unit 'foo'") {
		t.Errorf("log does not name the bad unit:\n%s", logs.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	must(t, os.Remove(filepath.Join(dir, "bad.yaml")))
	copyFile(t, runtime+"config/basic.yaml", filepath.Join(dir, "basic.yaml"))
	deadline := time.Now().Add(5 * time.Second)
	for r.Current() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	must(t, <-done)
	if c := r.Current(); c == nil || c.Domain("basic") == nil {
		t.Fatalf("after the file appeared: Current() = %v, want domain basic", c)
	}
	if got := metric(t, reg, "throttle_descriptors_config_valid"); got != 1 {
		t.Errorf("valid after the first load = %v, want 1", got)
	}

	if _, err := NewReloaderWithoutInitialConfig(dir, 0, Options{}, log, prometheus.NewRegistry()); err == nil {
		t.Error("interval 0: no error")
	}
}

// TestReloaderOnLoad: OnLoad hears of every load: nil for each
// configuration that loaded (the first included), the error for each
// distinct failure.
func TestReloaderOnLoad(t *testing.T) {
	var got []string
	onLoad := func(err error) {
		if err != nil {
			got = append(got, "error")
			return
		}
		got = append(got, "ok")
	}
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	copyFile(t, runtime+"config/basic.yaml", filepath.Join(dir, "basic.yaml"))
	r, err := NewReloader(dir, time.Hour, Options{OnLoad: onLoad}, log, prometheus.NewRegistry())
	must(t, err)
	_, _ = r.Reload() // no change
	copyFile(t, runtime+"reload.yaml", filepath.Join(dir, "reload.yaml"))
	_, _ = r.Reload()
	writeFile(t, filepath.Join(dir, "basic.yaml"), "domain: basic\ndescriptors:\n  - key: key1\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	_, _ = r.Reload()
	_, _ = r.Reload() // the same bad files: told once
	copyFile(t, runtime+"config/basic.yaml", filepath.Join(dir, "basic.yaml"))
	_, _ = r.Reload()
	if want := []string{"ok", "ok", "error", "ok"}; !slices.Equal(got, want) {
		t.Errorf("OnLoad heard %v, want %v", got, want)
	}

	// Started before the configuration is there: the failure, then the load.
	got = nil
	missing := filepath.Join(t.TempDir(), "later")
	r, err = NewReloaderWithoutInitialConfig(missing, time.Hour, Options{OnLoad: onLoad}, log, prometheus.NewRegistry())
	must(t, err)
	must(t, os.Mkdir(missing, 0o755))
	copyFile(t, runtime+"config/basic.yaml", filepath.Join(missing, "basic.yaml"))
	_, _ = r.Reload()
	if want := []string{"error", "ok"}; !slices.Equal(got, want) {
		t.Errorf("without initial config: OnLoad heard %v, want %v", got, want)
	}
}
