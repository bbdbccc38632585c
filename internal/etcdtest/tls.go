package etcdtest

import (
	"fmt"
	"math/big"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/pki"
)

// certValidity is short: a test's certificates are useless after it.
const certValidity = time.Hour

// PKI is a CA made for one test, with etcd's server certificate (for
// 127.0.0.1, ::1 and localhost) and a revocation list in files, and
// client certificates issued on demand.
type PKI struct {
	CA                    *pki.CA
	Dir                   string
	CAFile, CRLFile       string
	ServerCert, ServerKey string
	mu                    sync.Mutex
	revoked               []*big.Int
	issued                int
}

// NewPKI makes a CA and etcd's server certificate in a temporary
// directory of tb.
func NewPKI(tb testing.TB) *PKI {
	tb.Helper()
	ca, err := pki.NewCA("ringside test CA", certValidity)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	p := &PKI{
		CA: ca, Dir: dir,
		CAFile:     filepath.Join(dir, "ca.crt"),
		CRLFile:    filepath.Join(dir, "ca.crl"),
		ServerCert: filepath.Join(dir, "server.crt"),
		ServerKey:  filepath.Join(dir, "server.key"),
	}
	if err := pki.WriteFile(p.CAFile, ca.CertPEM(), 0o644); err != nil {
		tb.Fatal(err)
	}
	p.IssueServer(tb)
	p.Revoke(tb) // etcd needs a CRL file that parses, even an empty one
	return p
}

// IssueServer writes a new server certificate over the server files and
// returns it.
func (p *PKI) IssueServer(tb testing.TB) pki.Pair {
	tb.Helper()
	pair, err := p.CA.Server("etcd", []string{"127.0.0.1", "::1", "localhost"}, certValidity)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pair.Write(p.ServerCert, p.ServerKey); err != nil {
		tb.Fatal(err)
	}
	return pair
}

// Client issues a client certificate for cn into new files and returns
// their names.
func (p *PKI) Client(tb testing.TB, cn string) (certFile, keyFile string) {
	tb.Helper()
	p.mu.Lock()
	p.issued++
	base := fmt.Sprintf("client-%d-%s", p.issued, strings.ReplaceAll(cn, "/", "_"))
	p.mu.Unlock()
	certFile, keyFile = filepath.Join(p.Dir, base+".crt"), filepath.Join(p.Dir, base+".key")
	p.IssueClient(tb, cn, certFile, keyFile)
	return certFile, keyFile
}

// IssueClient writes a new client certificate for cn over certFile and
// keyFile (a rotation, when they exist) and returns it.
func (p *PKI) IssueClient(tb testing.TB, cn, certFile, keyFile string) pki.Pair {
	tb.Helper()
	pair, err := p.CA.Client(cn, certValidity)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pair.Write(certFile, keyFile); err != nil {
		tb.Fatal(err)
	}
	return pair
}

// Revoke adds serials to the CRL file, which etcd reads at every handshake.
func (p *PKI) Revoke(tb testing.TB, serials ...*big.Int) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revoked = append(p.revoked, serials...)
	crl, err := p.CA.CRL(certValidity, p.revoked...)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pki.WriteFile(p.CRLFile, crl, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// TLSConfig returns an ephemeral server config in dir that serves clients
// over TLS with p's server certificate and requires client certificates
// of p's CA that the CRL does not revoke.
func (p *PKI) TLSConfig(dir string) etcdserver.Config {
	cfg := etcdserver.EphemeralConfig(dir)
	cfg.ClientURL = "https://127.0.0.1:0"
	cfg.TLS.CertFile, cfg.TLS.KeyFile = p.ServerCert, p.ServerKey
	cfg.TLS.TrustedCAFile, cfg.TLS.ClientCertAuth = p.CAFile, true
	cfg.TLS.CRLFile = p.CRLFile
	return cfg
}

// StartTLS runs an etcd server for tb that requires client certificates
// of p's CA (TLSConfig).
func StartTLS(tb testing.TB, p *PKI) *etcdserver.Server {
	tb.Helper()
	return Restart(tb, p.TLSConfig(tb.TempDir()))
}
