package charts

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/strvals"

	"github.com/throttle-rl/throttle/internal/testkit/manifest"
)

// chartDir is the chart, relative to this package.
const chartDir = "throttle"

// kubeVersion is the Kubernetes version the chart is rendered for: the
// oldest its Chart.yaml kubeVersion allows.
const kubeVersion = "v1.30.0"

// release names the release and its namespace, as helm install's NAME and
// --namespace.
type release struct{ name, namespace string }

var defaultRelease = release{"throttle", "throttle"}

// rendered is a rendered chart: its objects, decoded, and NOTES.txt.
type rendered struct {
	set   *manifest.Set
	notes string
	// docs holds each rendered manifest, by template file.
	docs map[string]string
}

// input is what a user gives helm install: values files (-f, paths
// relative to this package), then a values file's text, --set and
// --set-file arguments (paths relative to this package).
type input struct {
	files   []string
	values  string
	set     []string
	setFile []string
}

// String is the input as text, for messages and for finding names in it.
func (in input) String() string {
	return "-f " + strings.Join(in.files, " -f ") + "\n" + in.values + "\n--set " + strings.Join(in.set, " --set ") + "\n--set-file " + strings.Join(in.setFile, " --set-file ")
}

// values parses the input with Helm's own parsers, in helm's order: the
// values files (a later one's maps merged over an earlier's), then --set,
// then --set-file.
func (in input) parse() (map[string]any, error) {
	m := map[string]any{}
	for _, f := range in.files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		vals, err := common.ReadValues(b)
		if err != nil {
			return nil, fmt.Errorf("values file %s: %w", f, err)
		}
		m = loader.MergeMaps(m, vals.AsMap())
	}
	vals, err := common.ReadValues([]byte(in.values))
	if err != nil {
		return nil, fmt.Errorf("values file: %w", err)
	}
	m = loader.MergeMaps(m, vals.AsMap())
	for _, s := range in.set {
		if err := strvals.ParseInto(s, m); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	readFile := func(rs []rune) (any, error) {
		b, err := os.ReadFile(string(rs))
		return string(b), err
	}
	for _, s := range in.setFile {
		if err := strvals.ParseIntoFile(s, m, readFile); err != nil {
			return nil, fmt.Errorf("--set-file %s: %w", s, err)
		}
	}
	return m, nil
}

func loadChart(t testing.TB) *chartv2.Chart {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

// renderChart renders the chart as `helm template` does: values coalesced
// with values.yaml and checked against values.schema.json, then every
// template executed. The engine runs in strict mode (as helm lint --strict):
// a template that reads a value values.yaml lacks fails.
func renderChart(ch *chartv2.Chart, rel release, vals map[string]any) (map[string]string, error) {
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, kubeVersion) {
		return nil, fmt.Errorf("chart kubeVersion %q excludes %s", ch.Metadata.KubeVersion, kubeVersion)
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{
		Name: rel.name, Namespace: rel.namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.RenderWithContext(context.Background(), ch, top)
}

// render renders the chart with the values and decodes every object
// strictly; any failure fails the test.
func render(t testing.TB, rel release, in input) rendered {
	t.Helper()
	vals, err := in.parse()
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderChart(loadChart(t), rel, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r := rendered{set: manifest.NewSet(), docs: map[string]string{}}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		base := path.Base(name)
		switch {
		case base == "NOTES.txt":
			r.notes = out[name]
			continue
		case strings.HasPrefix(base, "_"):
			continue
		}
		for i, doc := range manifest.Split([]byte(out[name])) {
			where := fmt.Sprintf("%s document %d", name, i)
			obj, err := manifest.Decode(doc)
			if err != nil {
				t.Fatalf("%s: %v\n%s", where, err, doc)
			}
			if err := r.set.Add(obj); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			r.docs[base] += string(doc)
		}
	}
	return r
}

// renderErr renders the chart and returns the error, for values that must fail.
func renderErr(t testing.TB, in input) error {
	t.Helper()
	vals, err := in.parse()
	if err != nil {
		return err
	}
	_, err = renderChart(loadChart(t), defaultRelease, vals)
	return err
}
