package testbin

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

// Tool is a command that tests run, pinned in a tools module of its own
// under internal/tools/<Name> (so that its dependencies stay out of the
// main module's go.mod) and built from there once into the user's cache
// directory. Declare one as a package variable: it builds at most once
// per test binary.
type Tool struct {
	// Name is the binary's name and the tools module's directory.
	Name string
	// Version is the pinned version, for the cache directory's name
	// and the messages.
	Version string
	// Package is the import path of the command's main package.
	Package string

	once sync.Once
	path string
	err  error
}

// Path returns the path of t's binary, building it on first use into
// <user cache>/ringside/<name>-<version>-<os>-<arch>-<go.sum hash>/ under a
// file lock, so test packages running at once build it once. Without a go
// command to build it with, the test skips, or fails when CI=true (CI must
// not pass by skipping what it is there to check).
func (t *Tool) Path(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("no go command to build %s with (CI=true: the tests that run it must run)", t.Name)
		}
		tb.Skipf("no go command to build %s with", t.Name)
	}
	path, err := t.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// Build is Path for programs: the binary's path, built on first use, or
// why it cannot be.
func (t *Tool) Build() (string, error) {
	t.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.err = fmt.Errorf("no go command to build %s with: %w", t.Name, err)
			return
		}
		var mod string
		if mod, t.err = t.module(); t.err == nil {
			t.path, t.err = t.build(goBin, mod)
		}
	})
	return t.path, t.err
}

// module finds internal/tools/<Name> above the working directory (a test
// runs in its package's directory).
func (t *Tool) module() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod := filepath.Join(dir, "internal", "tools", t.Name)
		if _, err := os.Stat(filepath.Join(mod, "go.mod")); err == nil {
			return mod, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no internal/tools/%s/go.mod above the working directory", t.Name)
		}
		dir = parent
	}
}

func (t *Tool) build(goBin, mod string) (string, error) {
	// The go.sum's hash names the cache directory: a new pin (or any
	// dependency of it) builds afresh instead of reusing a stale binary.
	sum, err := os.ReadFile(filepath.Join(mod, "go.sum"))
	if err != nil {
		return "", fmt.Errorf("%s tools module: %w", t.Name, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	h := sha256.Sum256(sum)
	dir := filepath.Join(cache, "ringside", fmt.Sprintf("%s-%s-%s-%s-%s", t.Name, t.Version, runtime.GOOS, runtime.GOARCH, hex.EncodeToString(h[:6])))
	bin := filepath.Join(dir, t.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%s cache: %w", t.Name, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("%s cache lock: %w", t.Name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("%s cache lock: %w", t.Name, err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp := bin + ".tmp"
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", tmp, t.Package)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s %s: %w\n%s", t.Name, t.Version, err, out.String())
	}
	// Renamed into place only once whole: a build killed halfway leaves
	// no binary that a later run would take for a good one.
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("build %s: %w", t.Name, err)
	}
	return bin, nil
}
