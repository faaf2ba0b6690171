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
	"regexp"
	"runtime"
	"slices"
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

// releaseTargets are the os/arch targets scripts/release-binaries.sh builds
// by default: the release's.
func releaseTargets(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "scripts/release-binaries.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^targets=\$\{RELEASE_TARGETS:-([^}]+)\}$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("scripts/release-binaries.sh has no line targets=${RELEASE_TARGETS:-…}")
	}
	return strings.Fields(string(m[1]))
}

// TestReleaseTargets: the release builds linux and darwin, amd64 and arm64.
func TestReleaseTargets(t *testing.T) {
	want := []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}
	if got := releaseTargets(t); !slices.Equal(got, want) {
		t.Errorf("scripts/release-binaries.sh builds %v, want %v (docs/release.md, the release workflow)", got, want)
	}
}

// TestReleaseBuild runs the release workflow's build of the binaries
// (scripts/release-binaries.sh) for this machine's target, which `make
// test` builds anyway (the tests run the binary): the archive holds an
// executable for this system and architecture (one of the release's
// targets, on the machines of CI and of the release), checksums.txt
// matches it, and it prints the version it was built with. The other targets are
// type-checked, not built (TestReleaseTargetsTypeCheck): a build for
// another system compiles every dependency anew, minutes each on a small
// machine. The release workflow and `make release` build all four.
func TestReleaseBuild(t *testing.T) {
	const version = "v0.0.0-test.1"
	host := runtime.GOOS + "/" + runtime.GOARCH
	out := t.TempDir()
	cmd := exec.Command("bash", "scripts/release-binaries.sh", version, out)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "RELEASE_TARGETS="+host)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release-binaries.sh: %v\n%s", err, b)
	}
	sums, err := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("throttle_%s_%s_%s", version, runtime.GOOS, runtime.GOARCH)
	archive, err := os.ReadFile(filepath.Join(out, name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(archive)
	if want := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"; string(sums) != want {
		t.Errorf("checksums.txt:\n%s\nwant\n%s", sums, want)
	}
	bin := untar(t, archive, name+"/throttle")
	// The release's targets: an executable for the system and architecture.
	if machine, ok := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}[host]; ok {
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil || f.Machine != machine || f.Type != elf.ET_EXEC {
			t.Errorf("%s: not a %v executable: %v", name, machine, err)
		}
	}
	if cpu, ok := map[string]macho.Cpu{"darwin/amd64": macho.CpuAmd64, "darwin/arm64": macho.CpuArm64}[host]; ok {
		f, err := macho.NewFile(bytes.NewReader(bin))
		if err != nil || f.Cpu != cpu || f.Type != macho.TypeExec {
			t.Errorf("%s: not a %v executable: %v", name, cpu, err)
		}
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

// TestReleaseTargetsTypeCheck: ./cmd/throttle and everything it imports
// type-check for every release target but this machine's (which
// TestReleaseBuild builds and runs), without cgo as the release builds it: the
// files selected for the target, each module's language version, the
// target's sizes (typeCheck).
func TestReleaseTargetsTypeCheck(t *testing.T) {
	for _, target := range releaseTargets(t) {
		if target == runtime.GOOS+"/"+runtime.GOARCH {
			continue
		}
		t.Run(strings.ReplaceAll(target, "/", "-"), func(t *testing.T) {
			goos, goarch, _ := strings.Cut(target, "/")
			errs, err := typeCheck(repoRoot, goos, goarch, "./cmd/throttle")
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range errs {
				t.Errorf("%s: %v", target, err)
			}
		})
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
