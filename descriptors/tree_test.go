package descriptors

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// configMap writes files into dir as the kubelet lays out a ConfigMap
// volume: the files in a timestamped folder ..<stamp>, a ..data symlink to
// it, and a symlink per file to ..data/<file>. Called again with other
// files, it swaps ..data to a new folder atomically (rename over the link)
// and removes the old one, as the kubelet does on an edit.
func configMap(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, stamp), 0o755))
	for name, content := range files {
		writeFile(t, filepath.Join(dir, stamp, name), content)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	must(t, os.Symlink(stamp, tmp))
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	must(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			must(t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if old != "" {
		must(t, os.RemoveAll(filepath.Join(dir, old)))
	}
}

// TestTreeReadsAConfigMap: Options.Tree reads a ConfigMap volume's files
// once each (not again under ..data), every file at any depth whatever its
// name, dot files only with TreeDotFiles, and a kubelet swap is reloaded.
func TestTreeReadsAConfigMap(t *testing.T) {
	dir := t.TempDir()
	configMap(t, dir, "..2026_12_05_08_00_00.1", map[string]string{
		"config.yaml": "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
	})
	must(t, os.MkdirAll(filepath.Join(dir, "team"), 0o755))
	writeFile(t, filepath.Join(dir, "team", "shop"), "domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "domain: hidden\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")

	names := func(opts Options) []string {
		t.Helper()
		srcs, err := readDir(dir, opts)
		must(t, err)
		var out []string
		for _, s := range srcs {
			rel, _ := filepath.Rel(dir, s.Name)
			out = append(out, rel)
		}
		return out
	}
	if got, want := names(Options{Tree: true}), []string{"config.yaml", "team/shop"}; !slices.Equal(got, want) {
		t.Errorf("Tree read %q, want %q", got, want)
	}
	if got, want := names(Options{Tree: true, TreeDotFiles: true}), []string{".hidden.yaml", "config.yaml", "team/shop"}; !slices.Equal(got, want) {
		t.Errorf("Tree with dot files read %q, want %q", got, want)
	}
	if got, want := names(Options{}), []string{"config.yaml"}; !slices.Equal(got, want) {
		t.Errorf("a plain folder read %q, want %q", got, want)
	}

	r, err := NewReloader(dir, time.Hour, Options{Tree: true}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	must(t, err)
	if m := r.Current().Match("edge", entries("k", "v")); m == nil || m.Limit.RequestsPerUnit != 3 {
		t.Fatalf("edge before the edit: %+v, want 3 a minute", m)
	}
	configMap(t, dir, "..2026_12_05_08_05_00.2", map[string]string{
		"config.yaml": "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n",
	})
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload after the swap = %v, %v", changed, err)
	}
	if m := r.Current().Match("edge", entries("k", "v")); m == nil || m.Limit.RequestsPerUnit != 7 {
		t.Fatalf("edge after the edit: %+v, want 7 a minute", m)
	}
	if r.Current().Domain("shop") == nil {
		t.Error("domain shop, in a subfolder, is gone after the swap")
	}
}
