// Package etcdlocal runs a real etcd server embedded in the process, from
// go.etcd.io/etcd/server/v3/embed. `ringside etcd` runs it for local use and
// demos; tests start one on free loopback ports through etcdtest.
package etcdlocal

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
	"go.etcd.io/etcd/server/v3/embed"
)

// Config says where the embedded server keeps its data and listens.
type Config struct {
	// Name of this member in the (single-member) cluster.
	Name string
	// Dir holds the data; reuse it to restart with the same contents.
	Dir string
	// ClientURL and PeerURL are listen (and advertise) URLs, for example
	// http://127.0.0.1:2379. https needs TLS.
	ClientURL, PeerURL string
	// TLS, when CertFile and KeyFile are set, serves clients over TLS. With
	// TrustedCAFile and ClientCertAuth, clients must present certificates.
	TLS transport.TLSInfo
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
		cfg.PeerURL = "http://" + e.Peers[0].Listener.Addr().String()
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
	curl, err := parseURL("client", cfg.ClientURL)
	if err != nil {
		return nil, err
	}
	purl, err := parseURL("peer", cfg.PeerURL)
	if err != nil {
		return nil, err
	}
	if curl.Scheme == "https" && (cfg.TLS.CertFile == "" || cfg.TLS.KeyFile == "") {
		return nil, errors.New("client URL is https but no TLS cert and key file are given")
	}
	if cfg.Dir == "" {
		return nil, errors.New("etcd data dir is empty")
	}
	e := embed.NewConfig()
	e.Name = cfg.Name
	e.Dir = cfg.Dir
	e.ListenClientUrls = []url.URL{*curl}
	e.AdvertiseClientUrls = []url.URL{*curl}
	e.ListenPeerUrls = []url.URL{*purl}
	e.AdvertisePeerUrls = []url.URL{*purl}
	e.InitialCluster = e.InitialClusterFromName(cfg.Name)
	e.ClientTLSInfo = cfg.TLS
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

// Endpoints returns the client URLs to give clientv3.
func (s *Server) Endpoints() []string { return []string{s.cfg.ClientURL} }

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
