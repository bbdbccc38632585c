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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// HelmVersion is the helm the chart is tested with (internal/tools/helm/go.mod).
const HelmVersion = "v3.22.0"

var (
	buildOnce sync.Once
	helmPath  string
	buildErr  error
)

// Helm returns the path of the helm binary, building it on first use
// (about a minute with a warm module cache, several cold) into
// <user cache>/ringside/helm-<version>-<go.sum hash>/, under a file lock so
// test packages running at once build it once.
func Helm(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		missing(tb, "no go command to build helm with")
	}
	path, err := BuildHelm(RepoRoot(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// BuildHelm is Helm for programs: the path of helm, built on first use
// from the repository at root.
func BuildHelm(root string) (string, error) {
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go command to build helm with: %w", err)
			return
		}
		helmPath, buildErr = build(goBin, root)
	})
	return helmPath, buildErr
}

func missing(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s (CI=true: the chart tests must run)", why)
	}
	tb.Skip(why)
}

func build(goBin, root string) (string, error) {
	mod := filepath.Join(root, "internal", "tools", "helm")
	sum, err := os.ReadFile(filepath.Join(mod, "go.sum"))
	if err != nil {
		return "", fmt.Errorf("helm tools module: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	h := sha256.Sum256(sum)
	dir := filepath.Join(cache, "ringside", fmt.Sprintf("helm-%s-%s-%s-%s", HelmVersion, runtime.GOOS, runtime.GOARCH, hex.EncodeToString(h[:6])))
	bin := filepath.Join(dir, "helm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("helm cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("helm cache lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("helm cache lock: %w", err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp := bin + ".tmp"
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", tmp, "helm.sh/helm/v3/cmd/helm")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build helm %s: %w\n%s", HelmVersion, err, out.String())
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("build helm: %w", err)
	}
	return bin, nil
}

// RepoRoot returns the repository's root: the nearest directory above the
// working directory that holds charts/ringside/Chart.yaml.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "charts", "ringside", "Chart.yaml")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no charts/ringside/Chart.yaml above the working directory")
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
