// Package charttest checks the Helm chart in charts/ringside with a real
// helm, built from helm.sh/helm/v3 (pinned in internal/tools/helm, a module
// of its own) once into the user's cache directory: `helm lint`, `helm
// template` of each values profile in testdata/profiles, every rendered
// object decoded strictly into its k8s.io/api type, and the invariants the
// chart promises (the webhook's scope, its CA, non-root containers with
// resources, RBAC without wildcards) asserted on them.
//
// Helm and RepoRoot are for other tests too (a `helm install` into the
// test control plane). Without a go command to build helm, tests skip, or
// fail when CI=true.
package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// HelmVersion is the helm the chart is tested with (internal/tools/helm/go.mod).
const HelmVersion = "v3.22.0"

// helm is the helm the chart is tested with, built from
// internal/tools/helm.
var helm = testbin.Tool{Name: "helm", Version: HelmVersion, Package: "helm.sh/helm/v3/cmd/helm"}

// Helm returns the path of the helm binary, building it on first use
// (about a minute with a warm module cache, several cold) into the user's
// cache directory (testbin.Tool). Without a go command, the test skips,
// or fails when CI=true.
func Helm(tb testing.TB) string {
	tb.Helper()
	return helm.Path(tb)
}

// BuildHelm is Helm for programs, run from within the checkout.
func BuildHelm() (string, error) { return helm.Build() }

// RepoRoot returns the repository's root: the nearest directory above the
// working directory that holds charts/ringside/Chart.yaml.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := FindRepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	return root
}

// FindRepoRoot is RepoRoot for programs.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "charts", "ringside", "Chart.yaml")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no charts/ringside/Chart.yaml above the working directory: run from the ringside checkout")
		}
		dir = parent
	}
}

// Run runs helm with args and returns its stdout, or an error with its
// stderr.
func Run(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	cmd := exec.Command(Helm(tb), args...)
	// helm's own state (repositories, plugins, cache) in the test's
	// directory, never the user's.
	home := tb.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %v: %w\n%s", args, err, stderr.String())
	}
	return stdout.String(), nil
}
