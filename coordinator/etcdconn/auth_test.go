package etcdconn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/etcdconn"
	"github.com/ringside/ringside/internal/etcdtest"
)

func passwordFile(t *testing.T, password string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(name, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestAJobsUserReachesItsOwnPrefixOnly grants two jobs, turns auth on and
// shows a's user reading, writing and keeping leases in a's prefix, and
// refused in b's and anywhere else: both for a user with a password and
// for one named by its client certificate.
func TestAJobsUserReachesItsOwnPrefixOnly(t *testing.T) {
	for _, byPassword := range []bool{true, false} {
		name := "by client certificate"
		if byPassword {
			name = "by password"
		}
		t.Run(name, func(t *testing.T) {
			p := etcdtest.NewPKI(t)
			srv := etcdtest.StartTLS(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			root := conn(t, p, srv, etcdconn.RootUser)
			admin := newClient(t, root)
			a := etcdconn.JobAccess{Namespace: "default", Job: "a"}
			b := etcdconn.JobAccess{Namespace: "default", Job: "b", Password: "b-pw"}
			if byPassword {
				a.Password = "a-pw"
			}
			for _, access := range []etcdconn.JobAccess{a, b, a} { // a twice: idempotent
				if err := etcdconn.GrantJob(ctx, admin, access); err != nil {
					t.Fatal(err)
				}
			}
			if err := etcdconn.EnableAuth(ctx, admin, ""); err != nil {
				t.Fatal(err)
			}
			if err := etcdconn.EnableAuth(ctx, admin, ""); err != nil {
				t.Fatalf("EnableAuth again, as root by certificate: %v", err)
			}

			var ac etcdconn.Config
			if byPassword {
				ac = conn(t, p, srv, "any-name") // the password's user wins over the CN
				ac.User, ac.PasswordFile = etcdconn.JobName("default", "a"), passwordFile(t, "a-pw")
			} else {
				ac = conn(t, p, srv, etcdconn.JobName("default", "a"))
			}
			ja := newClient(t, ac)

			if _, err := ja.Put(ctx, "/ringside/default/a/members/w0", "x"); err != nil {
				t.Fatalf("a's user cannot write a's prefix: %v", err)
			}
			if _, err := ja.Get(ctx, "/ringside/default/a/", clientv3.WithPrefix()); err != nil {
				t.Fatalf("a's user cannot read a's prefix: %v", err)
			}
			lease, err := ja.Grant(ctx, 5)
			if err != nil {
				t.Fatalf("a's user cannot take a lease: %v", err)
			}
			if _, err := ja.Put(ctx, "/ringside/default/a/members/w1", "x", clientv3.WithLease(lease.ID)); err != nil {
				t.Fatalf("a's user cannot register under a lease: %v", err)
			}
			if _, err := ja.KeepAliveOnce(ctx, lease.ID); err != nil {
				t.Fatalf("a's user cannot keep its lease alive: %v", err)
			}
			if _, err := ja.Revoke(ctx, lease.ID); err != nil {
				t.Fatalf("a's user cannot revoke its own job's lease: %v", err)
			}

			if _, err := admin.Put(ctx, "/ringside/default/b/members/w0", "b's"); err != nil {
				t.Fatal(err)
			}
			bLease, err := admin.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Put(ctx, "/ringside/default/b/members/w1", "b's", clientv3.WithLease(bLease.ID)); err != nil {
				t.Fatal(err)
			}
			denied := []struct {
				what string
				op   func() error
			}{
				{"read b's prefix", func() error { _, err := ja.Get(ctx, "/ringside/default/b/", clientv3.WithPrefix()); return err }},
				{"read b's member", func() error { _, err := ja.Get(ctx, "/ringside/default/b/members/w0"); return err }},
				{"write b's prefix", func() error { _, err := ja.Put(ctx, "/ringside/default/b/members/w9", "x"); return err }},
				{"delete b's member", func() error { _, err := ja.Delete(ctx, "/ringside/default/b/members/w0"); return err }},
				{"evict b's member by its lease", func() error { _, err := ja.Revoke(ctx, bLease.ID); return err }},
				{"read every job", func() error { _, err := ja.Get(ctx, "/ringside/", clientv3.WithPrefix()); return err }},
				{"write beside the prefix", func() error { _, err := ja.Put(ctx, "/ringside/default/ab", "x"); return err }},
				{"change users", func() error { _, err := ja.UserAdd(ctx, "mallory", "pw"); return err }},
			}
			for _, d := range denied {
				if err := d.op(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
					t.Errorf("a's user may %s: err = %v, want permission denied", d.what, err)
				}
			}
			if resp, err := admin.Get(ctx, "/ringside/default/b/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 2 {
				t.Fatalf("b's keys after a's attempts: %v, err %v; want both", resp, err)
			}

			stranger := newClient(t, conn(t, p, srv, "nobody"))
			if _, err := stranger.Get(ctx, "/ringside/default/a/", clientv3.WithPrefix()); err == nil {
				t.Fatal("a certificate whose common name is no user reads a's prefix")
			}
		})
	}
}

func TestEnableAuthWithARootPasswordLeavesRootInCharge(t *testing.T) {
	p := etcdtest.NewPKI(t)
	srv := etcdtest.StartTLS(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := newClient(t, conn(t, p, srv, "setup"))
	if err := etcdconn.GrantJob(ctx, admin, etcdconn.JobAccess{Namespace: "ns", Job: "a", Password: "a-pw"}); err != nil {
		t.Fatal(err)
	}
	if err := etcdconn.EnableAuth(ctx, admin, "root-pw"); err != nil {
		t.Fatal(err)
	}
	// admin's certificate names no user: once auth is on, it is nobody.
	if err := etcdconn.GrantJob(ctx, admin, etcdconn.JobAccess{Namespace: "ns", Job: "b"}); !errors.Is(err, rpctypes.ErrUserNotFound) {
		t.Fatalf("a client that is not root granted a job once auth is on: %v", err)
	}
	rc := conn(t, p, srv, "setup")
	rc.User, rc.PasswordFile = etcdconn.RootUser, passwordFile(t, "root-pw")
	if err := etcdconn.GrantJob(ctx, newClient(t, rc), etcdconn.JobAccess{Namespace: "ns", Job: "b"}); err != nil {
		t.Fatalf("root cannot grant a job once auth is on: %v", err)
	}
	wrong := rc
	wrong.PasswordFile = passwordFile(t, "guess")
	if c, err := etcdconn.New(wrong); err == nil {
		c.Close()
		t.Fatal("root with a wrong password was admitted")
	}
}

func TestGrantJobRefusesRootAndBadNames(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	for _, a := range []etcdconn.JobAccess{
		{Namespace: "default", Job: "a", User: etcdconn.RootUser},
		{Namespace: "default", Job: "a/b"},
		{Namespace: "", Job: "a"},
	} {
		if err := etcdconn.GrantJob(context.Background(), client, a); err == nil {
			t.Errorf("GrantJob(%+v) succeeded", a)
		}
	}
}
