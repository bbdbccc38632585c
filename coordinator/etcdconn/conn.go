// Package etcdconn is how ringside's processes connect to etcd: endpoints,
// mutual TLS, and etcd's authentication by password or by the client
// certificate's common name; and, in auth.go, the per-job role and user
// that confine a job's sidecars to the job's key prefix.
//
// Every command that dials etcd (sidecar, status) builds its client here,
// so TLS, certificate reload and credentials behave the same in all of
// them.
//
// Certificate rotation needs no restart: the client certificate and key
// are read again from their files at every TLS handshake
// (transport.TLSInfo's GetClientCertificate), so a connection made after
// the files were replaced (after an etcd restart, a network cut, a new
// `ringside status`) presents the new certificate. A connection already
// open keeps the certificate it was made with, as TLS does. The CA file is
// read once, at start: rotate a CA by putting old and new CA in the file
// before issuing certificates from the new one.
package etcdconn

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ringside/ringside/coordinator/record"
)

// Config says how to reach and authenticate to etcd.
type Config struct {
	// Endpoints are etcd's client URLs, http(s)://host:port.
	Endpoints []string
	// CertFile and KeyFile are the client certificate and its key, read
	// again at every handshake; CAFile is the CA that signed etcd's server
	// certificate (empty: the system's roots), read once.
	CertFile, KeyFile, CAFile string
	// User and Password authenticate to etcd's auth (empty: none, or, with
	// a client certificate and etcd's --client-cert-auth, the certificate's
	// common name is the user). PasswordFile holds the password instead
	// (its trailing newline ignored), read when the client is made.
	// The password is never logged: LogValue leaves it out.
	User, Password, PasswordFile string
	// DialTimeout bounds the first connection.
	DialTimeout time.Duration
}

// DefaultConfig is a local etcd without TLS or auth, what `ringside etcd`
// serves by default.
func DefaultConfig() Config {
	return Config{
		Endpoints: []string{"http://127.0.0.1:2379"},
		// 5 s: a TLS handshake and an authentication over a busy pod
		// network, with room for one retry.
		DialTimeout: 5 * time.Second,
	}
}

// TLS reports whether the client speaks TLS to etcd.
func (c Config) TLS() bool {
	if c.CertFile != "" || c.CAFile != "" {
		return true
	}
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "https://") {
			return true
		}
	}
	return false
}

// Validate reports every problem with the config that can be seen without
// dialing, each as a *record.FieldError naming the field, so that a
// command line can name its flag instead.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, name, format string, args ...any) {
		errs = append(errs, record.BadField(field, name, format, args...))
	}
	if len(c.Endpoints) == 0 {
		bad("Endpoints", "etcd endpoints", "are empty: give etcd's client URLs, e.g. https://etcd:2379")
	}
	for _, ep := range c.Endpoints {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Port() == "" {
			bad("Endpoints", "etcd endpoint", "%q is not http(s)://host:port", ep)
		}
	}
	if c.CertFile != "" && c.KeyFile == "" {
		bad("KeyFile", "etcd client key", "is missing: a client certificate needs its key")
	}
	if c.CertFile == "" && c.KeyFile != "" {
		bad("CertFile", "etcd client certificate", "is missing: a client key needs its certificate")
	}
	if c.Password != "" && c.PasswordFile != "" {
		bad("PasswordFile", "etcd password file", "is given with a password too: keep one")
	}
	hasPassword := c.Password != "" || c.PasswordFile != ""
	switch {
	case c.User == "" && hasPassword:
		bad("User", "etcd user", "is missing: a password needs its user")
	case c.User != "" && !hasPassword:
		bad("PasswordFile", "etcd password", "of user %q is missing (with a client certificate, leave the user out: the certificate's common name is the user)", c.User)
	}
	if c.DialTimeout < 0 {
		bad("DialTimeout", "etcd dial timeout", "must not be negative, got %s", c.DialTimeout)
	}
	return errors.Join(errs...)
}

// LogValue shows how the client connects, without the password.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("endpoints", strings.Join(c.Endpoints, ",")), slog.Bool("tls", c.TLS())}
	if c.CertFile != "" {
		attrs = append(attrs, slog.String("cert", c.CertFile))
	}
	if c.User != "" {
		attrs = append(attrs, slog.String("user", c.User))
	}
	return slog.GroupValue(attrs...)
}

// String is LogValue as text, so that printing a Config with %v shows no
// password either.
func (c Config) String() string {
	var parts []string
	for _, a := range c.LogValue().Group() {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, " ")
}

// New returns a client of etcd; opts are extra gRPC dial options (members
// use coordinator.DialOptions). Like clientv3.New it does not wait for
// etcd, except to authenticate when a user is set.
func New(c Config, opts ...grpc.DialOption) (*clientv3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ccfg := clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		DialOptions: opts,
		Logger:      zap.NewNop(),
		Username:    c.User,
		Password:    c.Password,
	}
	if c.PasswordFile != "" {
		var err error
		if ccfg.Password, err = ReadPassword(c.PasswordFile); err != nil {
			return nil, &record.FieldError{Field: "PasswordFile", Name: "etcd password file", Problem: err.Error()}
		}
	}
	if c.TLS() {
		info := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile}
		tlsCfg, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		ccfg.TLS = tlsCfg
	}
	client, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(c.Endpoints, ","), err)
	}
	return client, nil
}

// ReadPassword reads a password file, without its trailing newline (what
// echo and most secret stores add). An empty password is an error.
func ReadPassword(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", fmt.Errorf("password file %s is empty", name)
	}
	return p, nil
}
