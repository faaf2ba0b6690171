// Package strictyaml decodes YAML manifests and configs the way the
// Kubernetes API server does, for the tests that check the repository's
// deployment files.
package strictyaml

import (
	"errors"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Unmarshal decodes y into v: field names match case-sensitively, and unknown
// or duplicate fields are errors. (yaml.UnmarshalStrict alone matches field
// names case-insensitively, so "Domain:" would pass for "domain:".)
func Unmarshal(y []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(y)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
