package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/internal/etcdlocal"
)

func newEtcdCmd() *cobra.Command {
	cfg := etcdlocal.DefaultConfig("ringside-etcd")
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run a real etcd server embedded in ringside, for local use and demos",
		Long: `etcd runs a single-member etcd v3 server (go.etcd.io/etcd/server/v3/embed) in
this process until interrupted. Point sidecars at it with --etcd-endpoints.
For production, run a real etcd cluster instead.

With TLS, the server certificate and key are read again at every client
handshake, and the CRL file too: replace the files to rotate the
certificate or revoke a client's, without a restart. The CA file is read
at start.`,
		Example: `  # a throw-away server on the standard loopback ports
  ringside etcd --data-dir /tmp/ringside-etcd

  # TLS for clients, with client certificates required
  ringside etcd --listen-client-url https://127.0.0.1:2379 \
    --cert-file server.crt --key-file server.key \
    --trusted-ca-file ca.crt --client-cert-auth

  # then a role and a user per job, and etcd's authentication on
  ringside etcd auth setup --job llama --etcd-endpoints https://127.0.0.1:2379 \
    --etcd-ca ca.crt --etcd-cert root.crt --etcd-key root.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := etcdlocal.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			slog.Info("etcd serving", "endpoints", srv.Endpoints(), "data_dir", cfg.Dir)
			select {
			case <-cmd.Context().Done():
				slog.Info("stopping etcd")
				return nil
			case err := <-srv.Err():
				return fmt.Errorf("etcd: %w", err)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "data-dir", cfg.Dir, "directory for etcd's data (kept across restarts)")
	f.StringVar(&cfg.Name, "name", cfg.Name, "member name")
	f.StringVar(&cfg.ClientURL, "listen-client-url", cfg.ClientURL, "URL to serve clients on (http or https)")
	f.StringVar(&cfg.PeerURL, "listen-peer-url", cfg.PeerURL, "URL for the (unused) peer port of this single-member cluster")
	f.StringVar(&cfg.TLS.CertFile, "cert-file", "", "TLS certificate for clients")
	f.StringVar(&cfg.TLS.KeyFile, "key-file", "", "TLS key for clients")
	f.StringVar(&cfg.TLS.TrustedCAFile, "trusted-ca-file", "", "CA that client certificates must be signed by")
	f.BoolVar(&cfg.TLS.ClientCertAuth, "client-cert-auth", false, "require client certificates; with etcd's authentication on, a certificate's common name is the user it acts as")
	f.StringVar(&cfg.TLS.CRLFile, "client-crl-file", "", "revocation list of client certificates, read at every handshake")
	f.StringVar(&cfg.LogLevel, "etcd-log-level", cfg.LogLevel, "etcd's own log level: debug, info, warn or error")
	cmd.AddCommand(newEtcdAuthCmd())
	return cmd
}
