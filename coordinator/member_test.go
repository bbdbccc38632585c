package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
)

// registration is what identifies one registration of a member: its key's
// CreateRevision and the lease it is stored on.
type registration struct {
	createRev int64
	lease     clientv3.LeaseID
}

func registrationOf(t *testing.T, client *clientv3.Client, m *Member) registration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, m.key)
	if err != nil {
		t.Fatalf("read %s: %v", m.key, err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("%s is not registered", m.ID())
	}
	return registration{createRev: resp.Kvs[0].CreateRevision, lease: clientv3.LeaseID(resp.Kvs[0].Lease)}
}

func sessionOf(m *Member) *concurrency.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sess
}

func awaitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30s", what)
	}
}

func TestEtcdOutageLongerThanTheTTLKeepsEveryRegistration(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv, DialOptions()...)
	j := newTestJob(t, client, func(c *Config) { c.TTL = DefaultConfig("", "").TTL })
	names := []string{"a", "b", "c"}
	var ms []*Member
	for _, id := range names {
		ms = append(ms, join(t, j, id))
	}
	before := await(t, ms[0], "all three", hasIDs(names...))
	regs := map[string]registration{}
	for _, m := range ms {
		regs[m.ID()] = registrationOf(t, client, m)
	}

	// A probe on a lease of the same TTL that nobody re-attaches after
	// the outage: once etcd deletes its key, every lease left behind by
	// the outage has expired too, and a member that failed to keep its
	// registration has shown it.
	probe, err := concurrency.NewSession(client, concurrency.WithTTL(int(j.cfg.TTL/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	probeKey := "/probe/outage"
	put, err := client.Put(context.Background(), probeKey, "", clientv3.WithLease(probe.Lease()))
	if err != nil {
		t.Fatal(err)
	}

	cfg := srv.Config()
	srv.Close()
	// The outage lasts until every client-side keep-alive has given up
	// (about TTL after the last answer; each session's Done fires then):
	// the shortest outage that exposes a re-registration, without a fixed
	// sleep of 2*TTL+1s.
	awaitClosed(t, "probe keep-alive given up", probe.Done())
	for _, m := range ms {
		awaitClosed(t, m.ID()+"'s keep-alive given up", sessionOf(m).Done())
	}
	etcdtest.Restart(t, cfg)

	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitDelete(wctx, client, probeKey, put.Header.Revision+1); err != nil {
		t.Fatalf("probe lease did not expire after the restart: %v", err)
	}
	for _, m := range ms {
		if got := registrationOf(t, client, m); got != regs[m.ID()] {
			t.Errorf("%s registered again across the outage: %+v became %+v", m.ID(), regs[m.ID()], got)
		}
	}
	// A real change after the outage: its generation must directly follow
	// the one from before.
	d := join(t, j, "d")
	after := await(t, d, "generation with d", hasIDs("a", "b", "c", "d"))
	if after.Number != before.Number+1 {
		t.Fatalf("generation %d (%q) after the outage, want %d: a spurious generation was committed",
			after.Number, after.Reason, before.Number+1)
	}
}

func TestSecondJoinOfALiveIDFailsAndLeavesTheFirstAlone(t *testing.T) {
	j, client := testJob(t)
	a := join(t, j, "a")
	g := await(t, a, "a alone", hasIDs("a"))
	reg := registrationOf(t, client, a)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	second, err := j.Join(ctx, record.MemberInfo{ID: "a", Addr: "10.0.0.99", Slots: 1})
	if err == nil {
		second.Close()
		t.Fatal("a second Join of a live id succeeded")
	}
	if !errors.Is(err, ErrDuplicateMember) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("second Join: %v, want ErrDuplicateMember naming a", err)
	}
	if got := registrationOf(t, client, a); got != reg {
		t.Fatalf("a's registration %+v became %+v", reg, got)
	}
	select {
	case <-sessionOf(a).Done():
		t.Fatal("a lost its session")
	default:
	}
	if cur := j.Generation(); cur.Number != g.Number {
		t.Fatalf("generation %d (%q) committed, want none", cur.Number, cur.Reason)
	}
}

func TestJoinReplacesACrashedRegistrationOfItsIDOnceItExpires(t *testing.T) {
	j, client := testJob(t)
	first := join(t, j, "a")
	await(t, first, "a alone", hasIDs("a"))
	reg := registrationOf(t, client, first)
	first.Close() // a crash: nobody keeps the lease alive any more

	// The predecessor's lease runs out within a TTL, and etcd deletes its
	// key within expirySlack after that.
	ctx, cancel := context.WithTimeout(context.Background(), j.cfg.TTL+expirySlack+time.Second)
	defer cancel()
	second, err := j.Join(ctx, record.MemberInfo{ID: "a", Addr: "10.0.0.98", Slots: 1})
	if err != nil {
		t.Fatalf("Join after the predecessor crashed: %v", err)
	}
	t.Cleanup(second.Close)
	if got := registrationOf(t, client, second); got.lease != second.Lease() || got == reg {
		t.Fatalf("registration %+v, want a new one on lease %x", got, second.Lease())
	}
	await(t, second, "the new a", func(g *record.Generation) bool {
		r, ok := g.Member("a")
		return ok && r.Addr == "10.0.0.98"
	})
}

func TestMemberWhoseIDWasTakenOverStopsWithoutOverwritingIt(t *testing.T) {
	j, client := testJob(t)
	a := join(t, j, "a")
	await(t, a, "a alone", hasIDs("a"))

	// Another live registration takes the key, then a's own lease goes:
	// a must not write its record back over the other one.
	other, err := concurrency.NewSession(client, concurrency.WithTTL(int(j.cfg.TTL/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const theirs = `{"id":"a","addr":"10.0.0.97","slots":1,"state":"active"}`
	if _, err := client.Put(ctx, a.key, theirs, clientv3.WithLease(other.Lease())); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Revoke(ctx, a.Lease()); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(15 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-a.Generations():
		case <-timeout:
			t.Fatal("a did not stop within 15s: it registered again over the other registration")
		}
	}
	if err := a.Err(); !errors.Is(err, ErrDuplicateMember) {
		t.Fatalf("a stopped with %v, want ErrDuplicateMember", err)
	}
	resp, err := client.Get(ctx, a.key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != theirs || clientv3.LeaseID(resp.Kvs[0].Lease) != other.Lease() {
		t.Fatalf("the other registration was overwritten: %v", resp.Kvs)
	}
}

func TestRewritingARecordUnchangedCommitsNoGeneration(t *testing.T) {
	j, client := testJob(t)
	a, b := join(t, j, "a"), join(t, j, "b")
	before := await(t, a, "a and b", hasIDs("a", "b"))

	// b's record written again in place, unchanged, on the same lease and
	// then on a new one: what a member's re-registration does.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, b.key)
	if err != nil {
		t.Fatal(err)
	}
	value := string(resp.Kvs[0].Value)
	if _, err := client.Put(ctx, b.key, value, clientv3.WithLease(b.Lease())); err != nil {
		t.Fatal(err)
	}
	lease, err := client.Grant(ctx, int64(j.cfg.TTL/time.Second)*10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, b.key, value, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	// A real change afterwards: its generation must directly follow.
	c := join(t, j, "c")
	after := await(t, c, "generation with c", hasIDs("a", "b", "c"))
	if after.Number != before.Number+1 || after.Reason != "join c" {
		t.Fatalf("generation %d (%q), want %d (\"join c\"): the rewrite committed a generation",
			after.Number, after.Reason, before.Number+1)
	}
}
