package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/demo"
)

func newDemoCmd() *cobra.Command {
	cfg := demo.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch a ring form, lose a worker, grow and drain, on an embedded etcd",
		Long: `demo starts an embedded etcd and several members of one job, then crashes
one, adds two and drains one, printing every generation the elected leader
commits and how long each recovery took. It needs nothing but this binary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), os.Stdout, cfg)
		},
	}
	cmd.Flags().IntVar(&cfg.Workers, "workers", cfg.Workers, "workers at the start")
	cmd.Flags().DurationVar(&cfg.TTL, "ttl", cfg.TTL, "member lease TTL")
	cmd.Flags().DurationVar(&cfg.Settle, "settle", cfg.Settle, "leader's settle window for joins")
	return cmd
}
