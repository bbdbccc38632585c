package main

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ringside/ringside/coordinator/etcdconn"
)

// passwordEnv holds the etcd password. It is no flag, so the password shows
// neither in the process list nor in --help.
const passwordEnv = "RINGSIDE_ETCD_PASSWORD"

// addEtcdFlags registers how a command reaches etcd, the same flags in
// every command that dials it (sidecar, status, etcd auth), each with its
// default from the environment (RINGSIDE_ETCD_ENDPOINTS and so on).
func addEtcdFlags(f *pflag.FlagSet, c *etcdconn.Config) {
	f.StringSliceVar(&c.Endpoints, "etcd-endpoints", envList("RINGSIDE_ETCD_ENDPOINTS", c.Endpoints), "etcd client URLs, comma-separated (env RINGSIDE_ETCD_ENDPOINTS)")
	f.StringVar(&c.CertFile, "etcd-cert", envOr("RINGSIDE_ETCD_CERT", c.CertFile), "client certificate for etcd, read again at every new connection so it can be rotated in place (env RINGSIDE_ETCD_CERT)")
	f.StringVar(&c.KeyFile, "etcd-key", envOr("RINGSIDE_ETCD_KEY", c.KeyFile), "key of --etcd-cert (env RINGSIDE_ETCD_KEY)")
	f.StringVar(&c.CAFile, "etcd-ca", envOr("RINGSIDE_ETCD_CA", c.CAFile), "CA that signed etcd's server certificate (env RINGSIDE_ETCD_CA)")
	f.StringVar(&c.User, "etcd-user", envOr("RINGSIDE_ETCD_USER", c.User), "etcd user when etcd's authentication is on, with its password in --etcd-password-file or env "+passwordEnv+"; not needed with a client certificate, whose common name is then the user (env RINGSIDE_ETCD_USER)")
	f.StringVar(&c.PasswordFile, "etcd-password-file", envOr("RINGSIDE_ETCD_PASSWORD_FILE", c.PasswordFile), "file holding the password of --etcd-user (env RINGSIDE_ETCD_PASSWORD_FILE)")
	c.Password = os.Getenv(passwordEnv)
}

func envList(key string, def []string) []string {
	if v, ok := os.LookupEnv(key); ok {
		return strings.Split(v, ",")
	}
	return def
}
