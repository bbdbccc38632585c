// Package etcdserver runs a real etcd server embedded in the process, from
// go.etcd.io/etcd/server/v3/embed. `ringside etcd` runs it for local use and
// demos, alone or as one member of a cluster (the Helm chart's StatefulSet
// of three); tests start one on free loopback ports through etcdtest.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/embed"
)

// Config says where the embedded server keeps its data and listens.
type Config struct {
	// Name of this member in its cluster.
	Name string
	// Dir holds the data; reuse it to restart with the same contents.
	Dir string
	// ClientURL and PeerURL are listen URLs, for example
	// http://127.0.0.1:2379; they are advertised too unless
	// AdvertiseClientURL or AdvertisePeerURL is set. https needs TLS
	// (PeerTLS for the peer URL).
	ClientURL, PeerURL string
	// AdvertiseClientURL and AdvertisePeerURL are the URLs the other
	// members and the clients reach this one at, when they differ from
	// the listen URLs (a listen URL on 0.0.0.0 in a pod, advertised under
	// the pod's DNS name).
	AdvertiseClientURL, AdvertisePeerURL string
	// InitialCluster lists the members of a cluster of more than one at
	// its bootstrap, as name=peerURL,name=peerURL (etcd's
	// --initial-cluster); it must name this member. Empty: this member
	// alone.
	InitialCluster string
	// ClusterState is "new" when the cluster is bootstrapped with this
	// member, "existing" when it joins one that runs (after a
	// `member add`). Empty: new. Ignored once Dir holds data.
	ClusterState string
	// ClusterToken keeps the members of two clusters bootstrapped from
	// the same InitialCluster from joining each other. Empty: etcd's
	// default.
	ClusterToken string
	// TLS, when CertFile and KeyFile are set, serves clients over TLS. With
	// TrustedCAFile and ClientCertAuth, clients must present certificates.
	TLS transport.TLSInfo
	// PeerTLS secures the traffic between members the same way: with
	// ClientCertAuth, a peer must present a certificate TrustedCAFile
	// signed (its certificate serves and authenticates, so it needs both
	// extended key usages).
	PeerTLS transport.TLSInfo
	// MetricsURL serves /metrics, /health, /livez and /readyz in plain
	// HTTP (https uses TLS), for Prometheus and the kubelet's probes,
	// which then need no client certificate. Empty: none.
	MetricsURL string
	// LogLevel is etcd's own log level: debug, info, warn or error.
	LogLevel string
	// MaxRequestBytes bounds one request. Generations of very large jobs are
	// one value, so the default is above etcd's 1.5 MiB.
	MaxRequestBytes uint
	// UnsafeNoFsync skips fsync: for tests and benchmarks only.
	UnsafeNoFsync bool
	// BcryptCost is the cost of hashing the passwords of etcd's users
	// (0: etcd's default, 10). Every login pays it; tests set the
	// minimum, 4, since under the race detector a default-cost login
	// takes over a second, longer than a test lease's TTL.
	BcryptCost uint
	// StartTimeout bounds how long Start waits for the server to be ready.
	StartTimeout time.Duration
}

// DefaultConfig returns a config for a local server in dir on the standard
// loopback ports.
func DefaultConfig(dir string) Config {
	return Config{
		Name:            "ringside",
		Dir:             dir,
		ClientURL:       "http://127.0.0.1:2379",
		PeerURL:         "http://127.0.0.1:2380",
		LogLevel:        "warn",
		MaxRequestBytes: 8 << 20, // a 10,000-member generation is ~1 MiB
		StartTimeout:    30 * time.Second,
	}
}

// Server is a running embedded etcd.
type Server struct {
	cfg       Config
	etcd      *embed.Etcd
	closeOnce sync.Once
}

// Start starts the server and returns once it serves clients.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	ecfg, err := cfg.embed()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd data dir: %w", err)
	}
	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
		// Record the ports actually bound, so port 0 works and a restart
		// with Config() comes back on the same ports.
		scheme := "http://"
		if cfg.TLS.CertFile != "" {
			scheme = "https://"
		}
		cfg.ClientURL = scheme + e.Clients[0].Addr().String()
		scheme = "http://"
		if cfg.PeerTLS.CertFile != "" {
			scheme = "https://"
		}
		cfg.PeerURL = scheme + e.Peers[0].Listener.Addr().String()
		return &Server{cfg: cfg, etcd: e}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after %s", timeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
}

func (cfg Config) embed() (*embed.Config, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcd data dir is empty")
	}
	if cfg.Name == "" {
		return nil, errors.New("etcd member name is empty")
	}
	curl, err := parseURL("client", cfg.ClientURL)
	if err != nil {
		return nil, err
	}
	purl, err := parseURL("peer", cfg.PeerURL)
	if err != nil {
		return nil, err
	}
	acurl, apurl := curl, purl
	if cfg.AdvertiseClientURL != "" {
		if acurl, err = parseURL("advertised client", cfg.AdvertiseClientURL); err != nil {
			return nil, err
		}
	}
	if cfg.AdvertisePeerURL != "" {
		if apurl, err = parseURL("advertised peer", cfg.AdvertisePeerURL); err != nil {
			return nil, err
		}
	}
	if err := checkTLS("client", curl, cfg.TLS); err != nil {
		return nil, err
	}
	if err := checkTLS("peer", purl, cfg.PeerTLS); err != nil {
		return nil, err
	}
	if acurl.Scheme != curl.Scheme || apurl.Scheme != purl.Scheme {
		return nil, errors.New("an advertised URL's scheme differs from its listen URL's: use https for both or http for both")
	}
	e := embed.NewConfig()
	e.Name = cfg.Name
	e.Dir = cfg.Dir
	e.ListenClientUrls = []url.URL{*curl}
	e.AdvertiseClientUrls = []url.URL{*acurl}
	e.ListenPeerUrls = []url.URL{*purl}
	e.AdvertisePeerUrls = []url.URL{*apurl}
	e.InitialCluster = e.InitialClusterFromName(cfg.Name)
	if cfg.InitialCluster != "" {
		if err := checkInitialCluster(cfg.InitialCluster, cfg.Name, apurl); err != nil {
			return nil, err
		}
		e.InitialCluster = cfg.InitialCluster
	}
	switch cfg.ClusterState {
	case "":
	case embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting:
		e.ClusterState = cfg.ClusterState
	default:
		return nil, fmt.Errorf("initial cluster state %q: want new or existing", cfg.ClusterState)
	}
	if cfg.ClusterToken != "" {
		e.InitialClusterToken = cfg.ClusterToken
	}
	if cfg.MetricsURL != "" {
		murl, err := parseURL("metrics", cfg.MetricsURL)
		if err != nil {
			return nil, err
		}
		if murl.Scheme == "https" && cfg.TLS.CertFile == "" {
			return nil, errors.New("metrics URL is https but clients have no TLS cert and key file (it serves with theirs)")
		}
		e.ListenMetricsUrls = []url.URL{*murl}
	}
	e.ClientTLSInfo = cfg.TLS
	e.PeerTLSInfo = cfg.PeerTLS
	e.LogLevel = cfg.LogLevel
	if e.LogLevel == "" {
		e.LogLevel = "warn"
	}
	e.LogOutputs = []string{"stderr"}
	if cfg.MaxRequestBytes > 0 {
		e.MaxRequestBytes = cfg.MaxRequestBytes
	}
	e.UnsafeNoFsync = cfg.UnsafeNoFsync
	if cfg.BcryptCost > 0 {
		e.BcryptCost = cfg.BcryptCost
	}
	return e, nil
}

// checkTLS reports a URL whose scheme and TLS settings disagree, which
// etcd itself reports late or not at all (an https URL without a
// certificate, or certificates for an http URL that would go unused).
func checkTLS(what string, u *url.URL, info transport.TLSInfo) error {
	hasPair := info.CertFile != "" && info.KeyFile != ""
	switch {
	case (info.CertFile == "") != (info.KeyFile == ""):
		return fmt.Errorf("%s TLS needs both a cert file and a key file", what)
	case u.Scheme == "https" && !hasPair:
		return fmt.Errorf("%s URL is https but no TLS cert and key file are given", what)
	case u.Scheme == "http" && hasPair:
		return fmt.Errorf("%s TLS cert and key are given but the %s URL %s is http: use https", what, what, u)
	case info.ClientCertAuth && info.TrustedCAFile == "":
		return fmt.Errorf("%s certificate auth needs a trusted CA file", what)
	}
	return nil
}

// checkInitialCluster reports an initial cluster that does not parse or
// does not list this member under its advertised peer URL: etcd would
// refuse it too, later and less plainly.
func checkInitialCluster(s, name string, peer *url.URL) error {
	m, err := types.NewURLsMap(s)
	if err != nil {
		return fmt.Errorf("initial cluster %q: want name=peerURL,name=peerURL: %w", s, err)
	}
	urls, ok := m[name]
	if !ok {
		return fmt.Errorf("initial cluster %q does not name this member %q", s, name)
	}
	for _, u := range urls {
		if u.String() == peer.String() {
			return nil
		}
	}
	return fmt.Errorf("initial cluster lists member %q at %s, not at its advertised peer URL %s", name, urls, peer)
}

func parseURL(what, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s URL %q: %w", what, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s URL %q: scheme must be http or https", what, s)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return nil, fmt.Errorf("%s URL %q: want host:port: %w", what, s, err)
	}
	return u, nil
}

// Endpoints returns the client URLs to give clientv3: the advertised one
// when set, else the one bound.
func (s *Server) Endpoints() []string {
	if s.cfg.AdvertiseClientURL != "" {
		return []string{s.cfg.AdvertiseClientURL}
	}
	return []string{s.cfg.ClientURL}
}

// Config returns the config the server was started with.
func (s *Server) Config() Config { return s.cfg }

// Err reports a fatal server error; the channel is closed when the server
// stops.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server and waits for it; the data stays in Dir. Open
// client streams get up to etcd's request timeout (7 s) to finish. Close may
// be called more than once.
func (s *Server) Close() { s.closeOnce.Do(s.etcd.Close) }

// EphemeralConfig returns a config for a throw-away server in dir on
// loopback ports the kernel picks (port 0), without fsync and with cheap
// password hashing: for tests, benchmarks and demos.
func EphemeralConfig(dir string) Config {
	cfg := DefaultConfig(dir)
	cfg.ClientURL = "http://127.0.0.1:0"
	cfg.PeerURL = "http://127.0.0.1:0"
	cfg.LogLevel = "fatal" // etcd logs its own normal shutdown as errors
	cfg.UnsafeNoFsync = true
	cfg.BcryptCost = 4 // bcrypt.MinCost
	return cfg
}
