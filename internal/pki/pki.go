// Package pki issues throw-away X.509 certificates for etcd's mutual TLS
// (and the test Kubernetes control plane's): a CA, server certificates,
// client certificates (with groups) and revocation lists. Tests generate a fresh set per run; a production etcd
// takes its certificates from the cluster's own PKI (cert-manager, Vault...).
//
// Keys are ECDSA P-256: small, fast to generate (a test issues a dozen in
// a few milliseconds) and accepted by every TLS stack etcd clients use.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority whose key lives in memory.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// crlNumber grows with every CRL, as RFC 5280 asks.
	crlNumber int64
}

// Pair is an issued certificate and its private key, PEM encoded.
type Pair struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
}

// NewCA returns a self-signed CA named cn, valid for validity from a
// minute ago (so a clock a little behind still accepts it).
func NewCA(cn string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	tmpl, err := template(cn, validity)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	return &CA{Cert: cert, key: key}, nil
}

// CertPEM returns the CA's certificate, the file clients and servers trust.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Server issues a server certificate for hosts (IP addresses or DNS
// names), e.g. 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(cn string, hosts []string, validity time.Duration) (Pair, error) {
	if len(hosts) == 0 {
		return Pair{}, errors.New("server certificate: no hosts")
	}
	tmpl, err := template(cn, validity)
	if err != nil {
		return Pair{}, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	addHosts(tmpl, hosts)
	return ca.issue(tmpl)
}

// Peer issues a certificate for a member of a cluster (etcd's peers),
// which serves the other members and authenticates to them with the same
// certificate: server and client auth, for hosts.
func (ca *CA) Peer(cn string, hosts []string, validity time.Duration) (Pair, error) {
	if len(hosts) == 0 {
		return Pair{}, errors.New("peer certificate: no hosts")
	}
	tmpl, err := template(cn, validity)
	if err != nil {
		return Pair{}, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	addHosts(tmpl, hosts)
	return ca.issue(tmpl)
}

func addHosts(tmpl *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
}

// Client issues a client certificate whose common name is cn: with etcd's
// authentication on, cn is the etcd user the client acts as.
func (ca *CA) Client(cn string, validity time.Duration) (Pair, error) {
	return ca.ClientInGroups(cn, nil, validity)
}

// ClientInGroups issues a client certificate for cn with groups as its
// organizations: the Kubernetes API server reads the common name as the
// user and the organizations as the user's groups (system:masters...).
func (ca *CA) ClientInGroups(cn string, groups []string, validity time.Duration) (Pair, error) {
	tmpl, err := template(cn, validity)
	if err != nil {
		return Pair{}, err
	}
	tmpl.Subject.Organization = groups
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

// SigningKey returns a new P-256 private key (PKCS #8) and its public key
// (PKIX), both PEM: a signing key with no certificate, such as the
// Kubernetes service-account token issuer's.
func SigningKey() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

// CRL returns a DER revocation list (the encoding etcd's --client-crl-file
// reads), valid for validity, that revokes the
// certificates with the given serial numbers (none: an empty list, which
// a server configured with a CRL file needs to start).
func (ca *CA) CRL(validity time.Duration, revoked ...*big.Int) ([]byte, error) {
	now := time.Now()
	var entries []x509.RevocationListEntry
	for _, s := range revoked {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
	}
	ca.crlNumber++
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    big.NewInt(ca.crlNumber),
		ThisUpdate:                now.Add(-time.Minute),
		NextUpdate:                now.Add(validity),
		RevokedCertificateEntries: entries,
	}, ca.Cert, ca.key)
	if err != nil {
		return nil, fmt.Errorf("crl: %w", err)
	}
	return der, nil
}

func (ca *CA) issue(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("key for %q: %w", tmpl.Subject.CommonName, err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Pair{}, fmt.Errorf("certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("key for %q: %w", tmpl.Subject.CommonName, err)
	}
	return Pair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func template(cn string, validity time.Duration) (*x509.Certificate, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("certificate %q: validity must be positive, got %s", cn, validity)
	}
	// 128 random bits: serials must be unique per CA and unpredictable.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
	}, nil
}

// Write writes the pair to certFile and keyFile (the key readable by its
// owner only). Each file is replaced by a rename, so a reader sees the old
// or the new file, never half of one; a reader between the two renames
// sees a new certificate with the old key and fails that one handshake.
func (p Pair) Write(certFile, keyFile string) error {
	if err := WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		return err
	}
	return WriteFile(certFile, p.CertPEM, 0o644)
}

// WriteFile replaces name with data through a temporary file and a rename.
func WriteFile(name string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // after a failure; a renamed file is gone already
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
