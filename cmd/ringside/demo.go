package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/internal/demo"
)

func newDemoCmd() *cobra.Command {
	cfg := demo.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch a ring form, lose a worker, grow and drain, on an embedded etcd",
		Long: `demo starts an embedded etcd and several workers, each a real sidecar
process and a real ring all-reduce trainer process on its own loopback
address, then kills one, adds two and drains one, showing the ring live and
how long each recovery took. It needs ringtrainer next to this binary
(make build puts both in bin/).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Live = cfg.Live && isTerminal(os.Stdout)
			return demo.Run(cmd.Context(), os.Stdout, cfg)
		},
	}
	cmd.Flags().IntVar(&cfg.Workers, "workers", cfg.Workers, "workers at the start")
	cmd.Flags().DurationVar(&cfg.StepTime, "step-time", cfg.StepTime, "the trainers' simulated compute per step")
	cmd.Flags().DurationVar(&cfg.Settle, "settle", cfg.Settle, "leader's settle window for joins")
	cmd.Flags().StringVar(&cfg.TrainerBin, "trainer-bin", "", "ring trainer binary (default: ringtrainer next to ringside, or in PATH)")
	cmd.Flags().BoolVar(&cfg.Live, "live", true, "redraw a live view when stdout is a terminal")
	return cmd
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
