package etcdserver_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/loopback"
	"github.com/ringside/ringside/internal/pki"
)

// member is one member of a test cluster: its config and, once started,
// its server.
type member struct {
	cfg  etcdserver.Config
	addr string
	srv  *etcdserver.Server
}

// tlsCluster configures n members on their own loopback addresses with
// etcd's fixed ports (as pods of a StatefulSet on their IPs), TLS between
// the members and for clients, certificates required on both, and a
// metrics listener each. It returns the members and a client TLS config.
func tlsCluster(t *testing.T, n int) ([]*member, transport.TLSInfo) {
	t.Helper()
	block, err := loopback.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(block.Release)
	dir := t.TempDir()
	ca, err := pki.NewCA("etcd cluster test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := pki.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	issue := func(name string, pair pki.Pair, err error) (string, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		cert, key := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if err := pair.Write(cert, key); err != nil {
			t.Fatal(err)
		}
		return cert, key
	}
	var ms []*member
	var initial []string
	for i := range n {
		addr := block.Addr(i)
		name := fmt.Sprintf("etcd-%d", i)
		cfg := etcdserver.EphemeralConfig(filepath.Join(dir, name))
		cfg.Name = name
		cfg.ClientURL = "https://" + addr + ":2379"
		cfg.PeerURL = "https://" + addr + ":2380"
		cfg.MetricsURL = "http://" + addr + ":2381"
		cfg.ClusterToken = "cluster-test"
		cfg.StartTimeout = time.Minute
		pair, err := ca.Server(name, []string{addr}, time.Hour)
		cfg.TLS.CertFile, cfg.TLS.KeyFile = issue(name+"-server", pair, err)
		cfg.TLS.TrustedCAFile, cfg.TLS.ClientCertAuth = caFile, true
		// etcd checks a peer's client certificate against the address it
		// dials from, which on loopback is 127.0.0.1 whatever the address
		// it listens on; in a pod both are the pod's IP.
		pair, err = ca.Peer(name, []string{addr, "127.0.0.1"}, time.Hour)
		cfg.PeerTLS.CertFile, cfg.PeerTLS.KeyFile = issue(name+"-peer", pair, err)
		cfg.PeerTLS.TrustedCAFile, cfg.PeerTLS.ClientCertAuth = caFile, true
		initial = append(initial, name+"="+cfg.PeerURL)
		ms = append(ms, &member{cfg: cfg, addr: addr})
	}
	for _, m := range ms {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}
	pair, err := ca.Client("root", time.Hour)
	cert, key := issue("client", pair, err)
	return ms, transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: caFile}
}

// startAll starts the members at once: each waits for a quorum of the
// others before it serves.
func startAll(t *testing.T, ms []*member) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(ms))
	for i, m := range ms {
		wg.Go(func() { m.srv, errs[i] = etcdserver.Start(t.Context(), m.cfg) })
	}
	wg.Wait()
	for i, m := range ms {
		if errs[i] != nil {
			t.Fatalf("member %d: %v", i, errs[i])
		}
		t.Cleanup(m.srv.Close)
	}
}

func client(t *testing.T, m *member, tlsInfo transport.TLSInfo) *clientv3.Client {
	t.Helper()
	tc, err := tlsInfo.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: m.srv.Endpoints(), TLS: tc, DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func get(t *testing.T, c *clientv3.Client, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, key) // linearizable: goes through the leader
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func put(t *testing.T, c *clientv3.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func readyz(t *testing.T, m *member) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(m.cfg.MetricsURL + "/readyz")
	if err != nil {
		t.Fatalf("readyz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestThreeMembersServeTheSameDataAndSurviveOneStopped(t *testing.T) {
	ms, tlsInfo := tlsCluster(t, 3)
	startAll(t, ms)
	for i, m := range ms {
		if code := readyz(t, m); code != http.StatusOK {
			t.Errorf("member %d: /readyz answered %d, want 200", i, code)
		}
	}
	c0, c1, c2 := client(t, ms[0], tlsInfo), client(t, ms[1], tlsInfo), client(t, ms[2], tlsInfo)
	put(t, c0, "/ringside/test/k", "through member 0")
	if got := get(t, c1, "/ringside/test/k"); got != "through member 0" {
		t.Fatalf("read through member 1: %q, want the value written through member 0", got)
	}
	members, err := c2.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 3 {
		t.Fatalf("member list has %d members, want 3", len(members.Members))
	}

	ms[0].srv.Close()
	put(t, c1, "/ringside/test/k", "through member 1")
	if got := get(t, c2, "/ringside/test/k"); got != "through member 1" {
		t.Fatalf("with member 0 stopped, read through member 2: %q, want the value written through member 1", got)
	}
	if code := readyz(t, ms[2]); code != http.StatusOK {
		t.Errorf("with member 0 stopped, member 2's /readyz answered %d, want 200", code)
	}
}

func TestBadClusterSettingsAreRefusedBeforeStart(t *testing.T) {
	base := func() etcdserver.Config {
		cfg := etcdserver.EphemeralConfig(t.TempDir())
		cfg.Name = "etcd-0"
		cfg.PeerURL = "http://127.0.0.1:12380"
		return cfg
	}
	for _, tc := range []struct {
		name   string
		modify func(*etcdserver.Config)
		want   string
	}{
		{"an initial cluster that does not parse", func(c *etcdserver.Config) { c.InitialCluster = "etcd-0" }, "want name=peerURL"},
		{"an initial cluster without this member", func(c *etcdserver.Config) {
			c.InitialCluster = "etcd-1=http://127.0.0.1:12381,etcd-2=http://127.0.0.1:12382"
		}, `does not name this member "etcd-0"`},
		{"an initial cluster with this member elsewhere", func(c *etcdserver.Config) {
			c.InitialCluster = "etcd-0=http://127.0.0.1:2999"
		}, "not at its advertised peer URL"},
		{"an unknown cluster state", func(c *etcdserver.Config) { c.ClusterState = "joining" }, "want new or existing"},
		{"an https peer URL without a certificate", func(c *etcdserver.Config) { c.PeerURL = "https://127.0.0.1:12380" }, "peer URL is https but no TLS cert"},
		{"a peer certificate for an http peer URL", func(c *etcdserver.Config) {
			c.PeerTLS.CertFile, c.PeerTLS.KeyFile = "peer.crt", "peer.key"
		}, "peer TLS cert and key are given but the peer URL"},
		{"a peer certificate without its key", func(c *etcdserver.Config) { c.PeerTLS.CertFile = "peer.crt" }, "needs both a cert file and a key file"},
		{"peer certificate auth without a CA", func(c *etcdserver.Config) {
			c.PeerURL = "https://127.0.0.1:12380"
			c.PeerTLS = transport.TLSInfo{CertFile: "peer.crt", KeyFile: "peer.key", ClientCertAuth: true}
		}, "peer certificate auth needs a trusted CA file"},
		{"an advertised peer URL of another scheme", func(c *etcdserver.Config) { c.AdvertisePeerURL = "https://etcd-0.etcd:2380" }, "scheme differs"},
		{"a metrics URL without a port", func(c *etcdserver.Config) { c.MetricsURL = "http://127.0.0.1" }, "metrics URL"},
		{"no member name", func(c *etcdserver.Config) { c.Name = "" }, "member name is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.modify(&cfg)
			srv, err := etcdserver.Start(t.Context(), cfg)
			if err == nil {
				srv.Close()
				t.Fatalf("started; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}
