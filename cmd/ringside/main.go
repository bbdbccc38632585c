// Command ringside is the elastic training coordinator: sidecar, tools and
// benchmarks in one binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	var code exitCodeError
	switch {
	case errors.As(err, &code):
		os.Exit(int(code))
	case err != nil:
		fmt.Fprintln(os.Stderr, "ringside:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var logLevel, logFormat, profile string
	stopProfile := func() {}
	root := &cobra.Command{
		Use:   "ringside",
		Short: "Elastic data-parallel training on Kubernetes: fast rendezvous, failure detection and ring order",
		Long: `ringside keeps a training job's ring membership in etcd, elects one member to
commit each generation of the all-reduce group, and hands every trainer its
rank, world size and master address, so jobs survive worker loss and scaling
without restarting every process.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd.Flags()); err != nil {
				return err
			}
			logger, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			slog.SetDefault(logger)
			if profile != "" {
				stopProfile, err = startCPUProfile(profile)
			}
			return err
		},
		PersistentPostRun: func(*cobra.Command, []string) { stopProfile() },
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&logFormat, "log-format", "text", "log format: text or json")
	root.PersistentFlags().StringVar(&profile, "cpuprofile", "", "write a CPU profile of this process to the file until it exits (go tool pprof reads it)")
	root.AddCommand(newSidecarCmd(), newExecCmd(), newDiscoverHostsCmd(), newStatusCmd(), newEtcdCmd(), newBenchCmd(), newDemoCmd(), newNetoptCmd(), newGossipKeyCmd(), newControllerCmd(), newWebhookCmd())
	documentEnv(root)
	return root
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
