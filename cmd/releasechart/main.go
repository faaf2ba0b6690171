// Command releasechart packages the Helm chart for a release, as the
// release workflow (.github/workflows/release.yml) does when a tag is
// pushed: chart version and appVersion from the tag, image.repository the
// registry the workflow pushed the image to.
//
//	go run ./cmd/releasechart -version v1.2.3 -image ghcr.io/owner/throttle -out dist
//
// It prints the path of the package, dist/throttle-1.2.3.tgz.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/throttle-rl/throttle/charts"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "releasechart:", err)
			os.Exit(1)
		}
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("releasechart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "the release's tag, such as v1.2.3 (required)")
	image := fs.String("image", "", "the image's repository, such as ghcr.io/owner/throttle (required)")
	chart := fs.String("chart", "charts/throttle", "the chart's folder")
	out := fs.String("out", "dist", "where the package is written")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || *image == "" || fs.NArg() > 0 {
		return errors.New("usage: releasechart -version v1.2.3 -image ghcr.io/owner/throttle [-chart charts/throttle] [-out dist]")
	}
	path, err := charts.Package(*chart, *version, *image, *out)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, path)
	return nil
}
