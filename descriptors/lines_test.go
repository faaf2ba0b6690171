package descriptors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckGivesLines(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minutes\n      requests_per_unit: 1\n",
			`:4: domain "d" › descriptors[0] › rate_limit: invalid rate limit unit 'minutes'`},
		{"nested unknown key", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: c\n        ratelimit: {unit: second, requests_per_unit: 1}\n",
			`:6: domain "d" › descriptors[0] › descriptors[1]: config error, unknown key 'ratelimit'`},
		{"replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: x\n      replaces:\n        - name: x\n",
			`:4: domain "d" › descriptors[0] › rate_limit: replaces should not contain name of same descriptor`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			err := Check(Options{}, p)
			if err == nil || err.Error() != p+tc.want {
				t.Errorf("Check = %v\nwant %s%s", err, p, tc.want)
			}
			// The loader itself keeps upstream's "file: message" form.
			if _, err := LoadFiles(Options{}, p); err == nil || strings.HasPrefix(err.Error(), p+":") && !strings.HasPrefix(err.Error(), p+": ") {
				t.Errorf("LoadFiles = %v: want no line number", err)
			}
		})
	}
}
