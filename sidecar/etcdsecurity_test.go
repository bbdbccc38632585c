package sidecar_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/etcdconn"
	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/api"
)

// TestSidecarProcessesFormAGenerationOverMutualTLS runs `ringside sidecar`
// processes against an etcd that requires client certificates, each with
// its own certificate given by flags.
func TestSidecarProcessesFormAGenerationOverMutualTLS(t *testing.T) {
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	var procs []*sidecarProc
	for n := range 2 {
		cert, key := p.Client(t, "sidecar")
		procs = append(procs, startSidecar(t, srv.Endpoints(), n, "--etcd-ca", p.CAFile, "--etcd-cert", cert, "--etcd-key", key))
	}
	for _, proc := range procs {
		proc.waitReady(t)
	}
	r := procs[0].api.awaitRendezvous("a generation of both", func(r *api.Rendezvous) bool { return len(r.Members) == 2 })
	if got := procs[1].api.awaitRendezvous("w1 in it", func(q *api.Rendezvous) bool { return q.Generation >= r.Generation }); len(got.Members) != 2 {
		t.Fatalf("w1 sees %v, want w0 and w1", ids(got))
	}
}

// jobUser grants job (in namespace default) its etcd user with password
// pw on srv, as root by certificate, turns auth on and returns a password
// file.
func jobUser(t *testing.T, p *etcdtest.PKI, srv *etcdserver.Server, job, pw string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root := tlsConn(t, p, srv, etcdconn.RootUser)
	admin, err := etcdconn.New(root)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := etcdconn.GrantJob(ctx, admin, etcdconn.JobAccess{Namespace: "default", Job: job, Password: pw}); err != nil {
		t.Fatal(err)
	}
	if err := etcdconn.EnableAuth(ctx, admin, ""); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), job+".pw")
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func tlsConn(t *testing.T, p *etcdtest.PKI, srv *etcdserver.Server, cn string) etcdconn.Config {
	t.Helper()
	c := etcdconn.DefaultConfig()
	c.Endpoints, c.CAFile = srv.Endpoints(), p.CAFile
	c.CertFile, c.KeyFile = p.Client(t, cn)
	return c
}

// TestAJobsEtcdUserRunsItsJobAndNoOther: sidecars acting as job api's
// etcd user form api's generation; a sidecar of another job with api's
// credentials exits at start, naming the cause, and writes nothing.
func TestAJobsEtcdUserRunsItsJobAndNoOther(t *testing.T) {
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	pwFile := jobUser(t, p, srv, "api", "api-pw")
	asAPI := func(cfg *sidecar.Config) {
		cfg.Etcd = tlsConn(t, p, srv, "sidecar") // the password's user, not this CN, is who it acts as
		cfg.Etcd.User, cfg.Etcd.PasswordFile = etcdconn.JobName("default", "api"), pwFile
	}
	a0 := sidecartest.Start(t, nil, "api", "w0", asAPI)
	sidecartest.Start(t, nil, "api", "w1", asAPI)
	newAPIClient(t, a0.Socket).awaitRendezvous("api's generation of both", func(r *api.Rendezvous) bool { return len(r.Members) == 2 })

	cfg := sidecar.DefaultConfig()
	cfg.Job.Job, cfg.Job.TTL = "other", 2*time.Second
	asAPI(&cfg)
	cfg.MemberID, cfg.Advertise = "w0", "127.0.0.1"
	cfg.Socket = filepath.Join(t.TempDir(), "other.sock")
	cfg.GossipPort, cfg.NodeWatch, cfg.SysfsRoot = 0, false, t.TempDir()
	cfg.GossipKeys = []string{sidecartest.GossipKey(t, cfg.Etcd.Endpoints, "other")}
	intruder, err := sidecar.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = intruder.Run(ctx)
	if !errors.Is(err, coordinator.ErrAccessDenied) || !strings.Contains(err.Error(), "ringside etcd auth setup") {
		t.Fatalf("a sidecar of job other with api's user: Run = %v, want access denied naming the fix", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the denied sidecar retried until the deadline instead of exiting")
	}
	if strings.Contains(err.Error(), "api-pw") {
		t.Fatalf("the error shows the password: %v", err)
	}
	root, err := etcdconn.New(tlsConn(t, p, srv, etcdconn.RootUser))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	resp, err := root.Get(ctx, "/ringside/default/other/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys under other's prefix: %v (err %v), want none", resp, err)
	}
}

// TestASidecarReconnectsWithItsRotatedCertificate replaces a running
// sidecar's certificate files and revokes the old certificate, then
// restarts etcd, which closes every connection: the sidecar, never
// restarted, must connect again with the new certificate to see the next
// generation.
func TestASidecarReconnectsWithItsRotatedCertificate(t *testing.T) {
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	c0 := tlsConn(t, p, srv, "sidecar")
	a0 := sidecartest.Start(t, nil, "rot", "w0", func(cfg *sidecar.Config) { cfg.Etcd = c0 })
	api0 := newAPIClient(t, a0.Socket)
	api0.awaitRendezvous("w0's first generation", func(r *api.Rendezvous) bool { return has(r, "w0") })

	old := certSerial(t, c0.CertFile)
	p.IssueClient(t, "sidecar", c0.CertFile, c0.KeyFile)
	p.Revoke(t, old)
	cfg := srv.Config()
	srv.Close()
	srv = etcdtest.Restart(t, cfg)

	sidecartest.Start(t, nil, "rot", "w1", func(cfg *sidecar.Config) { cfg.Etcd = tlsConn(t, p, srv, "sidecar") })
	api0.awaitRendezvous("a generation of w0 and w1, seen by w0", func(r *api.Rendezvous) bool {
		return has(r, "w0") && has(r, "w1")
	})
}

func certSerial(t *testing.T, certFile string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s holds no PEM", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}
