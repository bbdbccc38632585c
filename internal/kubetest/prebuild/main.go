// Command prebuild builds the control plane that the Kubernetes tests run
// (kubebin.Binaries) into the user's cache, unless it is there already.
// `make test` starts it at the lowest CPU priority beside the tests: the
// build then takes the CPU the tests leave idle, where it used to begin
// only when the first package that needs it ran (alphabetically, 22
// minutes into a fresh machine's run) and hold that package up for its
// whole 11 minutes.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ringside/ringside/internal/kubetest/kubebin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := kubebin.Binaries(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prebuild:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "prebuild: the control plane is in", dir)
}
