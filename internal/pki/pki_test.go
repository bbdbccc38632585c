package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/pki"
)

func TestIssuedCertificatesVerifyForTheirUseOnly(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("etcd", []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Client("ringside/default/llama", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	verify := func(p pki.Pair, use x509.ExtKeyUsage, host string) error {
		_, err := p.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{use}, DNSName: host})
		return err
	}
	tests := []struct {
		name  string
		err   error
		valid bool
	}{
		{"the server certificate serves 127.0.0.1", verify(server, x509.ExtKeyUsageServerAuth, "127.0.0.1"), true},
		{"the server certificate serves localhost", verify(server, x509.ExtKeyUsageServerAuth, "localhost"), true},
		{"the server certificate serves no other host", verify(server, x509.ExtKeyUsageServerAuth, "etcd.example"), false},
		{"the server certificate is no client's", verify(server, x509.ExtKeyUsageClientAuth, ""), false},
		{"the client certificate authenticates a client", verify(client, x509.ExtKeyUsageClientAuth, ""), true},
		{"the client certificate serves nothing", verify(client, x509.ExtKeyUsageServerAuth, ""), false},
	}
	for _, tt := range tests {
		if (tt.err == nil) != tt.valid {
			t.Errorf("%s: verify = %v", tt.name, tt.err)
		}
	}
	if client.Cert.Subject.CommonName != "ringside/default/llama" {
		t.Errorf("client CN = %q", client.Cert.Subject.CommonName)
	}
	if _, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM); err != nil {
		t.Errorf("the client pair does not load: %v", err)
	}
}

func TestACRLListsTheRevokedSerials(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ca.Client("a", time.Hour)
	b, _ := ca.Client("b", time.Hour)
	if a.Cert.SerialNumber.Cmp(b.Cert.SerialNumber) == 0 {
		t.Fatal("two certificates share a serial")
	}
	der, err := ca.CRL(time.Hour, a.Cert.SerialNumber)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := crl.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatalf("the CRL is not signed by its CA: %v", err)
	}
	if n := len(crl.RevokedCertificateEntries); n != 1 || crl.RevokedCertificateEntries[0].SerialNumber.Cmp(a.Cert.SerialNumber) != 0 {
		t.Fatalf("revoked = %v, want a's serial only", crl.RevokedCertificateEntries)
	}
	if _, err := ca.Client("c", 0); err == nil {
		t.Fatal("a certificate without validity was issued")
	}
}
