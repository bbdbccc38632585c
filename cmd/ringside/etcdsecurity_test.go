package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/etcdconn"
	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/etcdtest"
)

// tlsFlags are the connection flags of a client of srv with a new
// certificate for cn.
func tlsFlags(t *testing.T, p *etcdtest.PKI, srv *etcdserver.Server, cn string) []string {
	t.Helper()
	cert, key := p.Client(t, cn)
	return []string{"--etcd-endpoints", srv.Endpoints()[0], "--etcd-ca", p.CAFile, "--etcd-cert", cert, "--etcd-key", key}
}

// tlsJob starts an etcd that requires client certificates and writes job
// llama's keys into it, as statusJob does.
func tlsJob(t *testing.T) (*etcdtest.PKI, *etcdserver.Server) {
	t.Helper()
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	c := etcdconn.DefaultConfig()
	c.Endpoints, c.CAFile = srv.Endpoints(), p.CAFile
	c.CertFile, c.KeyFile = p.Client(t, etcdconn.RootUser)
	client, err := etcdconn.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	putStatusKeys(t, client, map[string]any{
		"members/w0": record.MemberInfo{ID: "w0", Addr: "10.0.0.10", Slots: 2, State: record.StateActive},
		"generation": statusGeneration(1),
	})
	return p, srv
}

func statusOnce(t *testing.T, job string, flags []string) (jobstatus.Snapshot, error) {
	t.Helper()
	var out bytes.Buffer
	err := runStatusCmd(context.Background(), &out, append([]string{"--job", job, "--once", "--json", "--timeout", "3s"}, flags...)...)
	var s jobstatus.Snapshot
	if err == nil {
		if jerr := json.Unmarshal(out.Bytes(), &s); jerr != nil {
			t.Fatalf("output is not a snapshot: %v\n%s", jerr, out.String())
		}
	}
	return s, err
}

func TestStatusReadsAJobOverMutualTLS(t *testing.T) {
	p, srv := tlsJob(t)
	s, err := statusOnce(t, "llama", tlsFlags(t, p, srv, "operator"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Generation != 1 || len(s.Members) != 2 {
		t.Fatalf("snapshot = %+v, want generation 1 of w0 and w1", s)
	}
	if _, err := statusOnce(t, "llama", []string{"--etcd-endpoints", srv.Endpoints()[0], "--etcd-ca", p.CAFile}); err == nil {
		t.Fatal("status without a client certificate read the job")
	}
}

func runEtcdCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newEtcdCmd()
	cmd.SetArgs(args)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// TestEtcdAuthSetupGivesAJobAUserConfinedToItsPrefix runs `ringside etcd
// auth setup` for llama (turning auth on) and then, as root, for gpt; each
// job's user reads its own job's status and is refused the other's.
func TestEtcdAuthSetupGivesAJobAUserConfinedToItsPrefix(t *testing.T) {
	p, srv := tlsJob(t)
	pw := filepath.Join(t.TempDir(), "llama.pw")
	if err := os.WriteFile(pw, []byte("llama-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runEtcdCmd(t, append([]string{"auth", "setup", "--job", "llama", "--password-file", pw}, tlsFlags(t, p, srv, "setup")...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"role ringside/default/llama: read and write on /ringside/default/llama/", "user ringside/default/llama", "authentication: on"} {
		if !strings.Contains(out, want) {
			t.Errorf("setup printed %q, want %q in it", out, want)
		}
	}
	if strings.Contains(out, "llama-s3cret") {
		t.Fatalf("setup printed the password: %q", out)
	}
	if _, err := runEtcdCmd(t, append([]string{"auth", "setup", "--job", "gpt"}, tlsFlags(t, p, srv, "setup")...)...); err == nil {
		t.Fatal("a client that is not root set up a job after auth was on")
	}
	if _, err := runEtcdCmd(t, append([]string{"auth", "setup", "--job", "gpt"}, tlsFlags(t, p, srv, etcdconn.RootUser)...)...); err != nil {
		t.Fatalf("root, by certificate, cannot set up a second job: %v", err)
	}

	// llama's user by password (from the environment), gpt's by certificate.
	t.Setenv(passwordEnv, "llama-s3cret")
	llama := append(tlsFlags(t, p, srv, "anyone"), "--etcd-user", "ringside/default/llama")
	if s, err := statusOnce(t, "llama", llama); err != nil || s.Generation != 1 {
		t.Fatalf("llama's user reads llama: %+v, %v", s, err)
	}
	if _, err := statusOnce(t, "gpt", llama); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("llama's user reads gpt: err = %v, want permission denied", err)
	}
	t.Setenv(passwordEnv, "")
	gpt := tlsFlags(t, p, srv, "ringside/default/gpt")
	if _, err := statusOnce(t, "gpt", gpt); err != nil {
		t.Fatalf("gpt's user reads gpt: %v", err)
	}
	if _, err := statusOnce(t, "llama", gpt); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("gpt's user reads llama: err = %v, want permission denied", err)
	}
}
