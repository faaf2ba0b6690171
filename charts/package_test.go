package charts

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/throttle-rl/throttle/internal/testkit"
)

// TestPackage: the release workflow's chart (Package, run by
// cmd/releasechart) has the tag's version and appVersion, names the image
// the release pushed, with the tag, and keeps the rest of values.yaml as it
// is; what is not a release tag or an image repository is refused.
func TestPackage(t *testing.T) {
	out := t.TempDir()
	path, err := Package(chartDir, "v1.2.3", "ghcr.io/some-one/throttle", out)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "throttle-1.2.3.tgz"); path != want {
		t.Errorf("package at %s, want %s", path, want)
	}
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "1.2.3" || ch.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("version %q appVersion %q, want 1.2.3 and v1.2.3", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	docs, err := renderChart(ch, defaultRelease, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	dep := docs["throttle/templates/deployment.yaml"]
	for _, want := range []string{`image: "ghcr.io/some-one/throttle:v1.2.3"`, `app.kubernetes.io/version: "v1.2.3"`} {
		if !strings.Contains(dep, want) {
			t.Errorf("the packaged chart's Deployment lacks %s:\n%s", want, dep)
		}
	}
	src := string(testkit.MustRead(t, filepath.Join(chartDir, chartutil.ValuesfileName)))
	var packaged string
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			packaged = string(f.Data)
		}
	}
	if want := strings.Replace(src, "  repository: ghcr.io/throttle-rl/throttle\n", "  repository: ghcr.io/some-one/throttle\n", 1); packaged != want || packaged == src {
		t.Errorf("packaged values.yaml differs from the source's but for image.repository:\n%s", packaged)
	}

	for _, tc := range []struct{ version, image, want string }{
		{"1.2.3", "ghcr.io/o/throttle", `version "1.2.3": want a release tag such as v1.2.3`},
		{"v1.2", "ghcr.io/o/throttle", `version "v1.2": want a release tag`},
		{"v1.2.3-", "ghcr.io/o/throttle", `version "v1.2.3-": want a release tag`},
		{"v1.2.3+build.5", "ghcr.io/o/throttle", `version "v1.2.3+build.5": want a release tag`},
		{"v1.2.3", "ghcr.io/Owner/throttle", "want a repository in lower case without a tag"},
		{"v1.2.3", "ghcr.io/o/throttle:v1", "want a repository in lower case without a tag"},
		{"v1.2.3", "", "want a repository in lower case without a tag"},
	} {
		if _, err := Package(chartDir, tc.version, tc.image, t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Package(%q, %q) = %v, want an error containing %q", tc.version, tc.image, err, tc.want)
		}
	}
	if _, err := Package(chartDir, "v1.3.0-rc.1", "ghcr.io/o/throttle", t.TempDir()); err != nil {
		t.Errorf("a pre-release tag: %v", err)
	}
}
