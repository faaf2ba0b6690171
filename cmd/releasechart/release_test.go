package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// actionlint checks the release workflow; go run fetches this version
// through the Go module proxy, in a module of its own (its YAML library is
// a pre-release of the one the descriptors use).
const actionlint = "github.com/rhysd/actionlint/cmd/actionlint@v1.7.12"

const releaseWorkflow = ".github/workflows/release.yml"

// repoRoot is the repository's root, seen from this package's folder.
const repoRoot = "../.."

// TestReleaseWorkflow: actionlint finds nothing wrong in the release
// workflow (and does find a broken one), and the workflow builds what the
// tests build: scripts/release-binaries.sh, cmd/releasechart, and the image
// for both architectures from the Dockerfile.
func TestReleaseWorkflow(t *testing.T) {
	lint := func(path string) ([]byte, error) {
		cmd := exec.Command("go", "run", actionlint, "-no-color", path)
		cmd.Dir = repoRoot
		return cmd.CombinedOutput()
	}
	if out, err := lint(releaseWorkflow); err != nil {
		t.Fatalf("actionlint %s: %v\n%s", releaseWorkflow, err, out)
	}
	wf, err := os.ReadFile(filepath.Join(repoRoot, releaseWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`tags: ["v*"]`,
		`scripts/release-binaries.sh "$GITHUB_REF_NAME" dist`,
		`go run ./cmd/releasechart -version "$GITHUB_REF_NAME" -image "ghcr.io/${GITHUB_REPOSITORY,,}" -out dist`,
		`image="ghcr.io/${GITHUB_REPOSITORY,,}"`,
		"platforms: linux/amd64,linux/arm64",
		"build-args: VERSION=${{ github.ref_name }}",
		`helm push dist/throttle-*.tgz`,
	} {
		if !strings.Contains(string(wf), want) {
			t.Errorf("%s lacks %s", releaseWorkflow, want)
		}
	}

	broken := filepath.Join(t.TempDir(), "broken.yml")
	bad := strings.Replace(string(wf), "runs-on: ubuntu-latest", "runs-on: ${{ matrix.os }}", 1)
	if err := os.WriteFile(broken, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := lint(broken); err == nil || !strings.Contains(string(out), "matrix") {
		t.Errorf("actionlint passed a workflow naming an undefined matrix: %v\n%s", err, out)
	}
}

// TestReleaseBuild runs the release workflow's build of the binaries for
// every target: each archive holds an executable for its system and
// architecture, the checksums match, and the native one prints the version
// it was built with. It compiles Throttle four times (once per target, the
// build cache shared with other builds of the same target): this package's
// tests run apart from cmd/throttle's, with a timeout of their own.
func TestReleaseBuild(t *testing.T) {
	const version = "v0.0.0-test.1"
	out := t.TempDir()
	cmd := exec.Command("bash", "scripts/release-binaries.sh", version, out)
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release-binaries.sh: %v\n%s", err, b)
	}
	sums, err := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, target := range []struct {
		goos, goarch string
		elf          elf.Machine
		macho        macho.Cpu
	}{
		{"linux", "amd64", elf.EM_X86_64, 0},
		{"linux", "arm64", elf.EM_AARCH64, 0},
		{"darwin", "amd64", 0, macho.CpuAmd64},
		{"darwin", "arm64", 0, macho.CpuArm64},
	} {
		name := fmt.Sprintf("throttle_%s_%s_%s", version, target.goos, target.goarch)
		archive, err := os.ReadFile(filepath.Join(out, name+".tar.gz"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(archive)
		lines = append(lines, hex.EncodeToString(sum[:])+"  "+name+".tar.gz")
		bin := untar(t, archive, name+"/throttle")
		switch target.goos {
		case "linux":
			f, err := elf.NewFile(bytes.NewReader(bin))
			if err != nil || f.Machine != target.elf || f.Type != elf.ET_EXEC {
				t.Errorf("%s: not a %v executable: %v", name, target.elf, err)
			}
		case "darwin":
			f, err := macho.NewFile(bytes.NewReader(bin))
			if err != nil || f.Cpu != target.macho || f.Type != macho.TypeExec {
				t.Errorf("%s: not a %v executable: %v", name, target.macho, err)
			}
		}
		if target.goos != runtime.GOOS || target.goarch != runtime.GOARCH {
			continue
		}
		native := filepath.Join(t.TempDir(), "throttle")
		if err := os.WriteFile(native, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		got, err := exec.Command(native, "version").CombinedOutput()
		if want := "throttle " + version + "\n"; err != nil || string(got) != want {
			t.Errorf("%s version = %q, %v; want %q", name, got, err, want)
		}
	}
	if want := strings.Join(lines, "\n") + "\n"; string(sums) != want {
		t.Errorf("checksums.txt:\n%s\nwant\n%s", sums, want)
	}
}

// untar returns the file named name in the .tar.gz archive.
func untar(t *testing.T, archive []byte, name string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		names = append(names, h.Name)
	}
	t.Fatalf("no %s in the archive (it has %v)", name, names)
	return nil
}
