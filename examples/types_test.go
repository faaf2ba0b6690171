package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit/npxtest"
)

// TestNodeTypes: the Node example's types are those openapi-typescript
// generates from the API's OpenAPI document (restapi/openapi.yaml, what
// /openapi.json serves), and check.js type-checks against them with tsc
// (TestScripts runs it). A changed document fails here until the types are
// generated again.
func TestNodeTypes(t *testing.T) {
	dir := t.TempDir()
	npxtest.Install(t, dir, npxtest.OpenAPITypeScript, npxtest.TypeScript, npxtest.NodeTypes)
	bin := filepath.Join(dir, "node_modules", ".bin")

	generated := filepath.Join(dir, "generated.d.ts")
	run(t, os.Environ(), filepath.Join(bin, "openapi-typescript"), "../restapi/openapi.yaml", "-o", generated)
	got, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("node/throttle-api.d.ts")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(committed) {
		t.Errorf("examples/node/throttle-api.d.ts is not what %s generates from restapi/openapi.yaml: run\n"+
			"  cd examples/node && npx %s ../../restapi/openapi.yaml -o throttle-api.d.ts", npxtest.OpenAPITypeScript, npxtest.OpenAPITypeScript)
	}

	for _, f := range []string{"check.js", "tsconfig.json", "throttle-api.d.ts"} {
		b, err := os.ReadFile(filepath.Join("node", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tsc := exec.Command(filepath.Join(bin, "tsc"), "-p", filepath.Join(dir, "tsconfig.json"))
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Errorf("tsc: check.js does not type-check against the API's types: %v\n%s", err, out)
	}
}
