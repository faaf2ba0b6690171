package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// listed is what go list says of a package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string // as resolved: ImportMap applied
	ImportMap  map[string]string
	Module     *struct{ GoVersion string }
	Error      *struct{ Err string }
}

// checked is a package once type-checked: done is closed when pkg and err
// are set.
type checked struct {
	done chan struct{}
	pkg  *types.Package
	err  error
}

// typeCheck type-checks the packages of patterns, and every package they
// import (the standard library's too), from their source, as they are
// compiled for goos/goarch without cgo: the files `go list` selects for that
// target, each module's language version, the target's sizes. go/types
// makes the checks of the compiler's type checker (types2 is its twin);
// what it leaves to the compiler's back end and the linker (a function
// without a body or assembly, a symbol no file defines) it does not see.
// No code is generated and nothing is written to the build cache: on a
// machine whose cache lacks the target, where a build or go vet compiles
// every dependency for it anew (minutes on 2 cores), this takes seconds.
// It returns the first error of each package that has any, in dependency
// order (a package whose import failed is not checked).
func typeCheck(dir, goos, goarch string, patterns ...string) ([]error, error) {
	cmd := exec.Command("go", append([]string{"list", "-deps", "-e", "-json=ImportPath,Dir,GoFiles,Imports,ImportMap,Module,Error"}, patterns...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list for %s/%s: %v\n%s", goos, goarch, err, stderr.Bytes())
	}
	var pkgs []listed
	for d := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := d.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list for %s/%s: %w", goos, goarch, err)
		}
		pkgs = append(pkgs, p)
	}

	sizes := types.SizesFor("gc", goarch)
	if sizes == nil {
		return nil, fmt.Errorf("no sizes for %s", goarch)
	}
	byPath := map[string]*checked{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = &checked{done: make(chan struct{})}
	}
	// go list -deps lists a package after its imports: one goroutine per
	// package waits for its imports, then takes one of NumCPU slots.
	slots := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for _, p := range pkgs {
		c := byPath[p.ImportPath]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(c.done)
			c.pkg, c.err = checkOne(p, byPath, sizes, slots)
		}()
	}
	wg.Wait()
	var errs []error
	for _, p := range pkgs {
		if err := byPath[p.ImportPath].err; err != nil && !errors.Is(err, errImport) {
			errs = append(errs, err)
		}
	}
	return errs, nil
}

// errImport marks a package that could not be checked because an import
// failed (whose own error is reported).
var errImport = errors.New("an import failed")

func checkOne(p listed, byPath map[string]*checked, sizes types.Sizes, slots chan struct{}) (*types.Package, error) {
	if p.Error != nil {
		return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
	}
	if p.ImportPath == "unsafe" {
		return types.Unsafe, nil
	}
	for _, path := range p.Imports {
		dep, ok := byPath[path]
		if !ok {
			return nil, fmt.Errorf("%s imports %s, which go list did not list", p.ImportPath, path)
		}
		if <-dep.done; dep.err != nil {
			return nil, errImport
		}
	}
	slots <- struct{}{}
	defer func() { <-slots }()
	fset := token.NewFileSet()
	files := make([]*ast.File, 0, len(p.GoFiles))
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{
		Sizes: sizes,
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if to, ok := p.ImportMap[path]; ok {
				path = to
			}
			return byPath[path].pkg, nil
		}),
	}
	if p.Module != nil && p.Module.GoVersion != "" {
		conf.GoVersion = "go" + p.Module.GoVersion
	}
	pkg, err := conf.Check(p.ImportPath, fset, files, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.ImportPath, err)
	}
	return pkg, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// TestTypeCheckFindsTargetErrors: typeCheck finds what a build for one
// target would refuse and another's would not: a field of a struct that
// exists on linux only, in a function body, and a function whose only
// file is for linux; on linux it finds nothing.
func TestTypeCheckFindsTargetErrors(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":       "module example.com/m\n\ngo 1.22\n",
		"a/a.go":       "package a\n\nimport \"syscall\"\n\nfunc Attr() *syscall.SysProcAttr {\n\treturn &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}\n}\n",
		"b/b_linux.go": "package b\n\nfunc F() int { return 1 }\n",
		"b/b.go":       "package b\n",
		"c/c.go":       "package c\n\nimport \"example.com/m/b\"\n\nvar N = b.F()\n",
		"d/d.go":       "package d\n\nimport \"example.com/m/c\"\n\nvar M = c.N\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		target string
		want   []string
	}{
		{"linux/arm64", nil},
		{"darwin/arm64", []string{
			"example.com/m/a: " + filepath.Join(dir, "a/a.go") + ":6:30: unknown field Pdeathsig in struct literal of type syscall.SysProcAttr",
			"example.com/m/c: " + filepath.Join(dir, "c/c.go") + ":5:11: undefined: b.F",
		}},
	} {
		goos, goarch, _ := strings.Cut(tt.target, "/")
		errs, err := typeCheck(dir, goos, goarch, "./a", "./d")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range errs {
			got = append(got, e.Error())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: errors\n%s\nwant\n%s", tt.target, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
}
