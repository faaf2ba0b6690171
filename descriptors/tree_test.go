package descriptors

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/configmap"
)

// TestTreeReadsAConfigMap: Options.Tree reads a ConfigMap volume's files
// once each (not again under ..data), every file at any depth whatever its
// name, dot files only with TreeDotFiles, and a kubelet swap is reloaded.
func TestTreeReadsAConfigMap(t *testing.T) {
	dir := t.TempDir()
	configmap.Write(t, dir, map[string]string{
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
	configmap.Write(t, dir, map[string]string{
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
