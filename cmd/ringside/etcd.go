package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/etcdserver"
)

func newEtcdCmd() *cobra.Command {
	cfg := etcdserver.DefaultConfig("ringside-etcd")
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run a real etcd server embedded in ringside, alone or as a cluster member",
		Long: `etcd runs an etcd v3 server (go.etcd.io/etcd/server/v3/embed) in this process
until interrupted. Point sidecars at it with --etcd-endpoints.

Alone (no --initial-cluster) it is a single-member cluster, for local use
and demos. With --initial-cluster it is one member of a cluster: the Helm
chart runs three as a StatefulSet, each advertising its pod's DNS name,
with TLS between the members (--peer-*) and for clients. A member waits
for a quorum of its peers before it serves (--start-timeout);
--listen-metrics-url serves /metrics, /livez and /readyz (ready once the
member is in a cluster with a leader) for Prometheus and the kubelet.

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
    --etcd-ca ca.crt --etcd-cert root.crt --etcd-key root.key

  # member 0 of three, as the Helm chart's StatefulSet runs it
  ringside etcd --name etcd-0 --data-dir /var/lib/etcd \
    --listen-client-url https://0.0.0.0:2379 --advertise-client-url https://etcd-0.etcd:2379 \
    --listen-peer-url https://0.0.0.0:2380 --initial-advertise-peer-url https://etcd-0.etcd:2380 \
    --initial-cluster etcd-0=https://etcd-0.etcd:2380,etcd-1=https://etcd-1.etcd:2380,etcd-2=https://etcd-2.etcd:2380 \
    --initial-cluster-token ringside --cert-file tls.crt --key-file tls.key \
    --trusted-ca-file ca.crt --client-cert-auth \
    --peer-cert-file peer.crt --peer-key-file peer.key --peer-trusted-ca-file ca.crt \
    --peer-client-cert-auth --listen-metrics-url http://0.0.0.0:2381`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.StartTimeout <= 0 {
				return fmt.Errorf("--start-timeout must be positive, got %s", cfg.StartTimeout)
			}
			srv, err := etcdserver.Start(cmd.Context(), cfg)
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
	f.StringVar(&cfg.PeerURL, "listen-peer-url", cfg.PeerURL, "URL to serve the other members on (http or https; unused alone)")
	f.StringVar(&cfg.AdvertiseClientURL, "advertise-client-url", "", "client URL to advertise to the cluster and clients (default: --listen-client-url)")
	f.StringVar(&cfg.AdvertisePeerURL, "initial-advertise-peer-url", "", "peer URL to advertise to the other members; must be this member's URL in --initial-cluster (default: --listen-peer-url)")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "the cluster's members at bootstrap, name=peerURL,... naming this one (default: this member alone)")
	f.StringVar(&cfg.ClusterState, "initial-cluster-state", "new", "new: bootstrap the cluster with the others; existing: join a running one (after etcdctl member add)")
	f.StringVar(&cfg.ClusterToken, "initial-cluster-token", "", "token unique to this cluster, so members of another bootstrapped from the same list never join it")
	f.StringVar(&cfg.MetricsURL, "listen-metrics-url", "", "URL to serve /metrics, /health, /livez and /readyz on (http; empty: none)")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "longest to wait for the member to serve (a cluster member waits for a quorum of its peers)")
	f.StringVar(&cfg.PeerTLS.CertFile, "peer-cert-file", "", "TLS certificate for the other members (server and client auth)")
	f.StringVar(&cfg.PeerTLS.KeyFile, "peer-key-file", "", "TLS key of --peer-cert-file")
	f.StringVar(&cfg.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CA that the other members' certificates must be signed by")
	f.BoolVar(&cfg.PeerTLS.ClientCertAuth, "peer-client-cert-auth", false, "require the other members to present certificates")
	f.StringVar(&cfg.TLS.CertFile, "cert-file", "", "TLS certificate for clients")
	f.StringVar(&cfg.TLS.KeyFile, "key-file", "", "TLS key for clients")
	f.StringVar(&cfg.TLS.TrustedCAFile, "trusted-ca-file", "", "CA that client certificates must be signed by")
	f.BoolVar(&cfg.TLS.ClientCertAuth, "client-cert-auth", false, "require client certificates; with etcd's authentication on, a certificate's common name is the user it acts as")
	f.StringVar(&cfg.TLS.CRLFile, "client-crl-file", "", "revocation list of client certificates, read at every handshake")
	f.StringVar(&cfg.LogLevel, "etcd-log-level", cfg.LogLevel, "etcd's own log level: debug, info, warn or error")
	cmd.AddCommand(newEtcdAuthCmd())
	return cmd
}
