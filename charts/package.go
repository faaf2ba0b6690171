package charts

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
)

// releaseTag is a release's tag: v and a semantic version (SemVer 2.0.0),
// which Helm requires of a chart's version, without build metadata (a '+'
// is no character of an image tag).
var releaseTag = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// imageRepositoryLine is values.yaml's image.repository: the image key, the
// comments under it, and the repository line, whose value group 2 is.
var imageRepositoryLine = regexp.MustCompile(`(?m)^(image:\n(?:  #.*\n)*  repository: )(\S+)$`)

// Package packages the chart in dir for the release of version, a tag such
// as v1.2.3, as the release workflow does: chart version 1.2.3, appVersion
// v1.2.3 (the image tag the chart defaults to), and image.repository image,
// where the release pushed the image (such as ghcr.io/owner/throttle). The
// rest of values.yaml, comments included, stays as it is. It writes
// outDir/<chart>-<version>.tgz and returns its path.
func Package(dir, version, image, outDir string) (string, error) {
	if !releaseTag.MatchString(version) {
		return "", fmt.Errorf("version %q: want a release tag such as v1.2.3 or v1.3.0-rc.1 (v and a semantic version)", version)
	}
	if image == "" || image != strings.ToLower(image) || strings.ContainsAny(image, "@ ") ||
		strings.Contains(image[strings.LastIndex(image, "/")+1:], ":") {
		return "", fmt.Errorf("image %q: want a repository in lower case without a tag, such as ghcr.io/owner/throttle", image)
	}
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", err
	}
	ch.Metadata.Version = version[1:]
	ch.Metadata.AppVersion = version
	found := false
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if n := len(imageRepositoryLine.FindAllIndex(f.Data, -1)); n != 1 {
			return "", fmt.Errorf("%s: found %d image.repository lines, want 1", f.Name, n)
		}
		f.Data = imageRepositoryLine.ReplaceAll(f.Data, []byte("${1}"+image))
		found = true
	}
	img, _ := ch.Values["image"].(map[string]any)
	if !found || img == nil {
		return "", errors.New("the chart has no values.yaml with image.repository")
	}
	img["repository"] = image
	return chartutil.Save(ch, outDir) // validates the chart, its version too
}
