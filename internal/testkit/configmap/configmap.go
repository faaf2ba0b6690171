// Package configmap lays files out in a folder as the kubelet lays out a
// Kubernetes ConfigMap volume, and edits them as it does: by an atomic swap
// of the ..data symlink.
package configmap

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Write puts files (name → content) into dir as a ConfigMap volume holds
// them: in a timestamped folder ..<time>, a ..data symlink to it, and a
// symlink per file to ..data/<name>. Called again on the same dir, it is
// the kubelet's update: a new timestamped folder, ..data renamed over to
// it in one step, symlinks for new names, those of names no longer there
// removed, and the old folder removed.
func Write(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(dir, 0o755))
	stamp := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	must(os.Mkdir(filepath.Join(dir, stamp), 0o755))
	for name, content := range files {
		must(os.WriteFile(filepath.Join(dir, stamp, name), []byte(content), 0o644))
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	must(os.Symlink(stamp, tmp))
	must(os.Rename(tmp, filepath.Join(dir, "..data")))
	for name := range files {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			must(os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
		}
	}
	if old == "" {
		return
	}
	entries, err := os.ReadDir(filepath.Join(dir, old))
	must(err)
	for _, e := range entries {
		if _, kept := files[e.Name()]; !kept {
			must(os.Remove(filepath.Join(dir, e.Name())))
		}
	}
	must(os.RemoveAll(filepath.Join(dir, old)))
}
