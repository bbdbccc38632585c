// Package testbin builds the project's commands for tests that run them
// as real processes, and collects what those print.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Ringside is the import path of the ringside command.
const Ringside = "github.com/ringside/ringside/cmd/ringside"

// Build builds the command pkg (an import path) as dir/name and returns
// its path. It builds as the image's binaries are built (static, trimmed
// paths, stripped: see `make image`), so every test package and the
// binary size test share one compilation of the dependencies instead of
// one per set of flags.
func Build(dir, name, pkg string) (string, error) {
	path := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", path, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	return path, nil
}

// WithRingside is a TestMain body: it builds ringside into a temporary
// directory, sets *bin to it, runs the tests and returns their exit code:
// 1 when the build fails, or when the tests passed but left goroutines
// behind (goleak, with opts).
func WithRingside(m *testing.M, bin *string, opts ...goleak.Option) int {
	dir, err := os.MkdirTemp("", "ringside-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir, "ringside", Ringside); err != nil {
		fmt.Fprintln(os.Stderr, "building ringside for the multi-process tests:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			return 1
		}
	}
	return code
}
