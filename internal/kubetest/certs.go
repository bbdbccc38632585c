package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ringside/ringside/internal/pki"
)

// certValidity is short: a run's certificates are useless after it.
const certValidity = 24 * time.Hour

// serviceIP is the first address of serviceCIDR: the API server gives it
// to the kubernetes Service, so its serving certificate names it.
const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
)

// identity is a client of the API server: a user and its groups.
type identity struct {
	file, user string
	groups     []string
}

// The identities a run issues certificates for, as kubeadm names them.
var (
	adminID     = identity{"admin", "kubetest-admin", []string{"system:masters"}}
	managerID   = identity{"controller-manager", "system:kube-controller-manager", nil}
	schedulerID = identity{"scheduler", "system:kube-scheduler", nil}
)

// certs are the files a run's control plane reads, all in one directory.
type certs struct {
	dir                 string
	caFile              string
	serverCert, servKey string
	saKey, saPub        string
	ca                  *pki.CA
}

// makeCerts writes a new CA, the API server's serving certificate for
// hostIP (and the in-cluster names) and the service-account signing key.
func makeCerts(dir, hostIP string) (*certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubetest certs: %w", err)
	}
	ca, err := pki.NewCA("kubetest CA", certValidity)
	if err != nil {
		return nil, err
	}
	c := &certs{
		dir: dir, ca: ca,
		caFile:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		servKey:    filepath.Join(dir, "apiserver.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
	}
	if err := pki.WriteFile(c.caFile, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	hosts := []string{hostIP, "127.0.0.1", serviceIP, "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	server, err := ca.Server("kube-apiserver", hosts, certValidity)
	if err != nil {
		return nil, err
	}
	if err := server.Write(c.serverCert, c.servKey); err != nil {
		return nil, err
	}
	sa, saPub, err := pki.SigningKey()
	if err != nil {
		return nil, err
	}
	if err := pki.WriteFile(c.saKey, sa, 0o600); err != nil {
		return nil, err
	}
	if err := pki.WriteFile(c.saPub, saPub, 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// client issues id's certificate into the directory and returns the
// certificate and key files.
func (c *certs) client(id identity) (certFile, keyFile string, err error) {
	pair, err := c.ca.ClientInGroups(id.user, id.groups, certValidity)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(c.dir, id.file+".crt"), filepath.Join(c.dir, id.file+".key")
	return certFile, keyFile, pair.Write(certFile, keyFile)
}

// kubeconfig writes a kubeconfig for id against server and returns its
// path.
func (c *certs) kubeconfig(id identity, server string) (string, error) {
	certFile, keyFile, err := c.client(id)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, id.file+".kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: %s
current-context: kubetest
`, server, c.caFile, id.user, certFile, keyFile, id.user)
	return path, pki.WriteFile(path, []byte(body), 0o600)
}
