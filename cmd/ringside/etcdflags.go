package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/ringside/ringside/coordinator/etcdconn"
)

// passwordEnv holds the etcd password. It is no flag, so the password shows
// neither in the process list nor in --help.
const passwordEnv = "RINGSIDE_ETCD_PASSWORD"

// addEtcdFlags registers how a command reaches etcd, the same flags in
// every command that dials it (sidecar, status, etcd auth, controller).
func addEtcdFlags(f *pflag.FlagSet, c *etcdconn.Config) {
	f.StringSliceVar(&c.Endpoints, "etcd-endpoints", c.Endpoints, "etcd client URLs, http(s)://host:port, comma-separated")
	f.StringVar(&c.CertFile, "etcd-cert", c.CertFile, "client certificate for etcd, read again at every new connection so it can be rotated in place")
	f.StringVar(&c.KeyFile, "etcd-key", c.KeyFile, "key of --etcd-cert")
	f.StringVar(&c.CAFile, "etcd-ca", c.CAFile, "CA that signed etcd's server certificate (default: the system's roots)")
	f.StringVar(&c.User, "etcd-user", c.User, "etcd user when etcd's authentication is on, with its password in --etcd-password-file or env "+passwordEnv+"; not needed with a client certificate, whose common name is then the user")
	f.StringVar(&c.PasswordFile, "etcd-password-file", c.PasswordFile, "file holding the password of --etcd-user")
	c.Password = os.Getenv(passwordEnv)
}
