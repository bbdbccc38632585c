// Command prebuild builds the programs that tests run but the module does
// not link, the Kubernetes control plane (see internal/kubetest) and helm
// (see internal/charttest), into the user's cache directory, where the
// tests look for them. `make test` runs it beside the rest of its
// preparation (Debian packages, vet, the Python tests), so that on a fresh
// machine the long cold builds overlap that work instead of holding up
// the test packages that need them. With both cached it returns at once.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringside/ringside/internal/charttest"
	"github.com/ringside/ringside/internal/kubetest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "prebuild:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	start := time.Now()
	helm, err := charttest.BuildHelm()
	if err != nil {
		return err
	}
	kube, err := kubetest.Binaries(ctx, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Printf("prebuild: helm at %s, the control plane in %s (%s)\n", helm, kube, time.Since(start).Round(time.Second))
	return nil
}
