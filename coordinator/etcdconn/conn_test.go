package etcdconn_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/etcdconn"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/etcdtest"
)

// refusedWithin bounds how long a test waits to see a client refused: the
// client retries until its context ends, so a refusal is an error at the
// deadline.
const refusedWithin = 1500 * time.Millisecond

// conn returns the connection config of a client of s that presents a new
// certificate of p for cn.
func conn(t *testing.T, p *etcdtest.PKI, s *etcdserver.Server, cn string) etcdconn.Config {
	t.Helper()
	c := etcdconn.DefaultConfig()
	c.Endpoints = s.Endpoints()
	c.CAFile = p.CAFile
	c.CertFile, c.KeyFile = p.Client(t, cn)
	return c
}

func newClient(t *testing.T, c etcdconn.Config) *clientv3.Client {
	t.Helper()
	client, err := etcdconn.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func put(client *clientv3.Client, key string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, err := client.Put(ctx, key, "v")
	return err
}

func serial(t *testing.T, certFile string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

func TestEtcdRequiringClientCertificatesAdmitsOnlyThoseOfItsCA(t *testing.T) {
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	good := conn(t, p, srv, "w0")
	revoked := conn(t, p, srv, "w1")
	p.Revoke(t, serial(t, revoked.CertFile))
	other := etcdtest.NewPKI(t)
	foreign := good
	foreign.CertFile, foreign.KeyFile = other.Client(t, "w0")
	none := good
	none.CertFile, none.KeyFile = "", ""
	plain := good
	plain.Endpoints = []string{strings.Replace(good.Endpoints[0], "https://", "http://", 1)}
	plain.CertFile, plain.KeyFile, plain.CAFile = "", "", ""

	tests := []struct {
		name   string
		client etcdconn.Config
		admit  bool
	}{
		{"a certificate of its CA is admitted", good, true},
		{"a client without a certificate is refused", none, false},
		{"a certificate of another CA is refused", foreign, false},
		{"a revoked certificate is refused", revoked, false},
		{"a client without TLS is refused", plain, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := put(newClient(t, tt.client), "/k/"+tt.name, refusedWithin)
			if tt.admit && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.admit && err == nil {
				t.Fatal("admitted")
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := newClient(t, good).Get(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 {
		t.Fatalf("%d keys written, want only the admitted client's", resp.Count)
	}
}

// TestARotatedClientCertificateIsUsedWithoutARestart replaces a client's
// certificate files and revokes the old certificate; the client, not
// restarted, makes its next connection (after an etcd restart closed the
// old one) with the new certificate, which a client stuck on the old one
// could not.
func TestARotatedClientCertificateIsUsedWithoutARestart(t *testing.T) {
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	c := conn(t, p, srv, "w0")
	client := newClient(t, c)
	if err := put(client, "/k/before", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// Keep a copy of the old files, to show the old certificate is refused.
	old := c
	old.CertFile, old.KeyFile = filepath.Join(t.TempDir(), "old.crt"), filepath.Join(t.TempDir(), "old.key")
	for from, to := range map[string]string{c.CertFile: old.CertFile, c.KeyFile: old.KeyFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	oldSerial := serial(t, c.CertFile)
	rotated := p.IssueClient(t, "w0", c.CertFile, c.KeyFile)
	p.Revoke(t, oldSerial)
	if rotated.Cert.SerialNumber.Cmp(oldSerial) == 0 {
		t.Fatal("the rotated certificate has the old serial")
	}
	if err := put(newClient(t, old), "/k/old", refusedWithin); err == nil {
		t.Fatal("the revoked certificate is still admitted")
	}

	cfg := srv.Config()
	srv.Close()
	etcdtest.Restart(t, cfg)
	if err := put(client, "/k/after", 10*time.Second); err != nil {
		t.Fatalf("the client did not reconnect with its rotated certificate: %v", err)
	}
}

// TestTheEmbeddedServerServesARotatedCertificateWithoutARestart checks
// what `ringside etcd` relies on: etcd reads its certificate files at
// every handshake.
func TestTheEmbeddedServerServesARotatedCertificateWithoutARestart(t *testing.T) {
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	c := conn(t, p, srv, "w0")
	servedSerial := func() *big.Int {
		t.Helper()
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(p.CA.Cert)
		host := strings.TrimPrefix(srv.Endpoints()[0], "https://")
		conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	first := servedSerial()
	if want := serial(t, p.ServerCert); first.Cmp(want) != 0 {
		t.Fatalf("served serial %x, want the server file's %x", first, want)
	}
	rotated := p.IssueServer(t)
	if got := servedSerial(); got.Cmp(rotated.Cert.SerialNumber) != 0 {
		t.Fatalf("after the rotation etcd serves serial %x, want the new %x (the old was %x)", got, rotated.Cert.SerialNumber, first)
	}
	if err := put(newClient(t, c), "/k/after", 5*time.Second); err != nil {
		t.Fatalf("a client cannot use etcd after the server's rotation: %v", err)
	}
}

func TestValidateNamesTheBadFieldAndNoFlag(t *testing.T) {
	tests := []struct {
		name        string
		mutate      func(*etcdconn.Config)
		field, want string
	}{
		{"no endpoints", func(c *etcdconn.Config) { c.Endpoints = nil }, "Endpoints", "etcd endpoints are empty"},
		{"an endpoint without a port", func(c *etcdconn.Config) { c.Endpoints = []string{"https://etcd"} }, "Endpoints", `"https://etcd" is not http(s)://host:port`},
		{"a certificate without its key", func(c *etcdconn.Config) { c.CertFile = "c.crt" }, "KeyFile", "etcd client key is missing"},
		{"a key without its certificate", func(c *etcdconn.Config) { c.KeyFile = "c.key" }, "CertFile", "etcd client certificate is missing"},
		{"a user without a password", func(c *etcdconn.Config) { c.User = "u" }, "PasswordFile", `password of user "u" is missing`},
		{"a password without a user", func(c *etcdconn.Config) { c.PasswordFile = "pw" }, "User", "etcd user is missing"},
		{"a password twice", func(c *etcdconn.Config) { c.User, c.Password, c.PasswordFile = "u", "p", "pw" }, "PasswordFile", "with a password too"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := etcdconn.DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			var fe *record.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "--") {
				t.Fatalf("Validate() = %v, want a *record.FieldError of %s with %q and no flag", err, tt.field, tt.want)
			}
		})
	}
	if err := etcdconn.DefaultConfig().Validate(); err != nil {
		t.Fatalf("the default config: %v", err)
	}
}

func TestAConfigPrintsWithoutItsPassword(t *testing.T) {
	c := etcdconn.DefaultConfig()
	c.User, c.Password = "ringside/default/llama", "s3cret-pw"
	for _, s := range []string{c.String(), c.LogValue().String()} {
		if strings.Contains(s, "s3cret-pw") || !strings.Contains(s, "ringside/default/llama") {
			t.Fatalf("printed as %q: want the user and no password", s)
		}
	}
}
