// Package kubebin builds the Kubernetes control plane that the tests run
// (kube-apiserver, kube-controller-manager, kube-scheduler and kubectl,
// from the tools module beside it) into the user's cache. It needs only the
// standard library, so `make test` can start the build (prebuild) before
// anything else is compiled.
package kubebin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/ringside/ringside/internal/progress"
)

// Version is the Kubernetes release the tools module pins.
const Version = "v1.37.2"

// ldflags strip the symbols (a third smaller, faster to link) and stamp
// the version that a module build leaves at v0.0.0-master: clients that
// check the server's version (Helm's kubeVersion) see the real one.
const ldflags = "-s -w -X k8s.io/component-base/version.gitVersion=" + Version +
	" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" +
	" -X k8s.io/component-base/version.gitTreeState=clean"

// Components are the control-plane commands built from the tools module.
var Components = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// kubectl is built with them, in the same go build: it shares nearly every
// package with them, so it costs little more than its link.
const kubectl = "kubectl"

// ErrUnavailable marks what a machine lacks to run the control plane (a Go
// toolchain to build it, root for the pod network): tests skip on it
// outside CI and fail in CI (see Require).
var ErrUnavailable = errors.New("kubetest: unavailable here")

// Binaries returns the directory holding the control-plane commands,
// building them first when the cache lacks them. The cache is keyed by the
// tools module's go.mod and go.sum, so a version bump builds anew; an
// flock serializes test packages that need a build at the same time (the
// second waits and reuses the first's). Progress goes to progress.
func Binaries(ctx context.Context, progress io.Writer) (string, error) {
	tools, err := toolsDir()
	if err != nil {
		return "", err
	}
	key, err := toolsKey(tools)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kubetest binaries: %w", err)
	}
	dir := filepath.Join(cache, "ringside", "kube-"+Version+"-"+key)
	if complete(dir) {
		return dir, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w: no Go toolchain to build the control plane: %v", ErrUnavailable, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("kubetest binaries: %w", err)
	}
	unlock, err := lockFile(ctx, dir+".lock", progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(dir) { // built by the holder we waited for
		return dir, nil
	}
	return dir, build(ctx, goBin, tools, dir, progress)
}

// build compiles the components into a fresh directory and renames it to
// dir, so a build killed halfway never leaves a cache that looks complete.
func build(ctx context.Context, goBin, tools, dir string, progress io.Writer) error {
	tmp := dir + ".building"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("kubetest build: %w", err)
	}
	// No DWARF: the link drops it anyway (-w), and the compiler does a
	// tenth less work without it.
	args := []string{"build", "-trimpath", "-gcflags=all=-dwarf=false", "-ldflags=" + ldflags, "-o", tmp + "/"}
	for _, c := range append(Components, kubectl) {
		args = append(args, "k8s.io/kubernetes/cmd/"+c)
	}
	fmt.Fprintf(progress, "kubetest: building kube-apiserver, kube-controller-manager, kube-scheduler and kubectl %s into %s (a cold build takes 10 minutes or more on 2 cores; later runs reuse it)\n", Version, dir)
	start := time.Now()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = tools
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	cmd.Stdout, cmd.Stderr = progress, progress
	stopTick := tick(progress, start)
	err := cmd.Run()
	stopTick()
	if err != nil {
		return fmt.Errorf("kubetest build of the control plane: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("kubetest build: %w", err)
	}
	fmt.Fprintf(progress, "kubetest: control plane built in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// tick says the build is still going, once a minute until stopped, so a
// quiet test run is not taken for a hung one.
func tick(w io.Writer, start time.Time) (stop func()) {
	return progress.Every(time.Minute, func() {
		fmt.Fprintf(w, "kubetest: still building the control plane (%s)\n", time.Since(start).Round(time.Second))
	})
}

// Kubectl returns the path of kubectl of the control plane's release,
// built with it (see Binaries).
func Kubectl(ctx context.Context, progress io.Writer) (string, error) {
	dir, err := Binaries(ctx, progress)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, kubectl), nil
}

func complete(dir string) bool {
	for _, c := range append(Components, kubectl) {
		if fi, err := os.Stat(filepath.Join(dir, c)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// toolsDir finds the tools module in the kubetest directory, from this
// file's source path: tests run in the source tree, so the tree is there.
func toolsDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("%w: cannot locate the tools module", ErrUnavailable)
	}
	dir := filepath.Join(filepath.Dir(file), "..", "tools")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("%w: tools module: %v", ErrUnavailable, err)
	}
	return dir, nil
}

// toolsKey is the first 12 hex digits of the SHA-256 of go.mod, go.sum,
// the link flags and the commands built: what decides the binaries.
func toolsKey(tools string) (string, error) {
	h := sha256.New()
	h.Write([]byte(ldflags))
	h.Write([]byte(strings.Join(append(Components, kubectl), " ")))
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(tools, f))
		if err != nil {
			return "", fmt.Errorf("kubetest tools module: %w", err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// lockFile takes an exclusive flock on path, waiting (and saying so) while
// another process holds it; ctx bounds the wait.
func lockFile(ctx context.Context, path string, progress io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubetest build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(progress, "kubetest: another test package is building the control plane; waiting for it\n")
		locked := make(chan error, 1)
		go func() { locked <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
		select {
		case err = <-locked:
		case <-ctx.Done():
			f.Close() // the blocked flock returns once the holder lets go
			return nil, ctx.Err()
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("kubetest build lock: %w", err)
		}
	}
	return func() { f.Close() }, nil
}
