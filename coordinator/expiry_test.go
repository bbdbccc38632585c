package coordinator

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// timeOut deletes member id's key as its lease expiring would, and returns
// the value to put back, as the member registering again would.
func timeOut(t *testing.T, client *clientv3.Client, j *Job, id string) string {
	t.Helper()
	key := j.cfg.Prefix() + record.MembersDir + id
	resp, err := client.Delete(context.Background(), key, clientv3.WithPrevKV())
	if err != nil || len(resp.PrevKvs) != 1 {
		t.Fatalf("delete %s: %v", key, err)
	}
	return string(resp.PrevKvs[0].Value)
}

func putMember(t *testing.T, client *clientv3.Client, j *Job, id, value string) {
	t.Helper()
	if _, err := client.Put(context.Background(), j.cfg.Prefix()+record.MembersDir+id, value); err != nil {
		t.Fatal(err)
	}
}

// A member whose key times out (an etcd frozen past the TTL expires every
// lease) and registers again within the grace costs no generation.
func TestAKeyThatTimedOutAndCameBackCostsNoGeneration(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL, c.ExpiryGrace = 60*time.Second, time.Hour })
	a, _, _ := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	g := await(t, a, "all three", hasIDs("a", "b", "c"))
	value := timeOut(t, client, j, "c")
	putMember(t, client, j, "c", value)
	join(t, j, "d") // the next change, to see what was committed before it
	next := await(t, a, "generation with d", hasIDs("a", "b", "c", "d"))
	if next.Number != g.Number+1 || next.Reason != "join d" {
		t.Fatalf("generation %d %q after %d, want %d \"join d\": c's return cost a generation", next.Number, next.Reason, g.Number, g.Number+1)
	}
}

// A member that does not come back leaves when the grace ends.
func TestAKeyThatTimedOutLeavesWhenTheGraceEnds(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL, c.ExpiryGrace = 60*time.Second, 500*time.Millisecond })
	a, _, _ := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, a, "all three", hasIDs("a", "b", "c"))
	timeOut(t, client, j, "c")
	next := await(t, a, "generation without c", hasIDs("a", "b"))
	if !slices.Contains(next.Left, "c") {
		t.Fatalf("generation %d left %v, want c", next.Number, next.Left)
	}
}

// A new process under a held member's id (a restarted pod) is not the
// member coming back: its peers must form a new group with it.
func TestANewInstanceUnderAHeldIDRestartsTheRing(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL, c.ExpiryGrace = 60*time.Second, time.Hour })
	// a leads: c's crash must not take the leadership with it for the
	// minute its lease lives.
	a := join(t, j, "a")
	leaderOf(t, a)
	join(t, j, "b")
	c := join(t, j, "c")
	g := await(t, a, "all three", hasIDs("a", "b", "c"))
	c.Close()
	value := timeOut(t, client, j, "c")
	info, err := record.DecodeMember("members/c", []byte(value), 0)
	if err != nil {
		t.Fatal(err)
	}
	join(t, j, "c", func(mi *record.MemberInfo) { mi.Addr = info.Addr })
	next := await(t, a, "generation after c's new instance", func(n *record.Generation) bool { return n.Number > g.Number })
	if !strings.Contains(next.Reason, "restart c") {
		t.Fatalf("generation %d %q, want a restart of c", next.Number, next.Reason)
	}
}

// A new leader holds the members of the generation whose keys are gone
// without an eviction, as the old leader would have.
func TestANewLeaderHoldsMembersWhoseKeysTimedOut(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL, c.ExpiryGrace = 60*time.Second, time.Hour })
	a := join(t, j, "a")
	leaderOf(t, a)
	b, _ := join(t, j, "b"), join(t, j, "c")
	g := await(t, b, "all three", hasIDs("a", "b", "c"))
	value := timeOut(t, client, j, "c")
	// The leader goes with c gone: the next one must hold c too. a leaves
	// (its departure is meant), so the next generation drops a only.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	next := await(t, b, "generation without a", func(n *record.Generation) bool { return n.Number > g.Number })
	if !hasIDs("b", "c")(next) {
		t.Fatalf("generation %d has %v (%q), want b and c: a left, c is held", next.Number, next.IDs(), next.Reason)
	}
	putMember(t, client, j, "c", value)
}

// A leader that kept its lease through an outage but is no longer a
// candidate by the rule (the generation names another leader, whose key
// timed out) must not sit on its election key: every candidate after it
// would wait for that key forever.
func TestALeaderThatKeptItsLeaseDoesNotBlockTheElection(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL, c.ExpiryGrace, c.Candidates = 60*time.Second, time.Hour, 1 })
	a := join(t, j, "a")
	leaderOf(t, a)
	b := join(t, j, "b")
	g := await(t, b, "both", hasIDs("a", "b"))
	if g.Leader != "a" {
		t.Fatalf("generation committed by %q, want a", g.Leader)
	}
	// a's lease goes (a frozen etcd expired it): b takes over. a's client
	// notices only at its next keep-alive (a third of the TTL away), so b
	// is elected before a campaigns again; then a registers again, held,
	// so the generation still names a.
	if _, err := client.Revoke(context.Background(), a.Lease()); err != nil {
		t.Fatal(err)
	}
	if leaderOf(t, b) != b {
		t.Fatal("b did not take over")
	}
	orphan(a) // now, not at its next keep-alive
	awaitKey(t, client, j.cfg.Prefix()+record.MembersDir+"a")
	// b's client gives up on its lease while etcd still has it (an outage
	// shorter than etcd's own expiry): b re-attaches to the same lease.
	orphan(b)
	join(t, j, "c")
	next := await(t, a, "generation with c", hasIDs("a", "b", "c"))
	t.Logf("generation %d committed by %s", next.Number, next.Leader)
}

// awaitKey waits until key exists.
func awaitKey(t *testing.T, client *clientv3.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		resp, err := client.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("%s did not appear: %v", key, err)
		}
		if resp.Count > 0 {
			return
		}
		select {
		case <-client.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)):
		case <-ctx.Done():
			t.Fatalf("%s did not appear within 10s", key)
		}
	}
}

// orphan makes m's client give up its lease, as a keep-alive that goes
// unanswered for the TTL does.
func orphan(m *Member) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sess.Orphan()
}

// In a job of two one vote never evicts: a dead member leaves when its
// lease expires. The survivor's vote against it says it died, so its place
// is not held as that of a key that only timed out, whether it led (the
// survivor's term starts without it) or not.
func TestAMemberVotedAgainstIsNotHeldWhenItsKeyTimesOut(t *testing.T) {
	for _, leaderDies := range []bool{true, false} {
		t.Run(map[bool]string{true: "the leader dies", false: "a follower dies"}[leaderDies], func(t *testing.T) {
			j, _ := testJob(t, func(c *Config) { c.TTL, c.ExpiryGrace = time.Second, time.Hour })
			first := join(t, j, "a")
			leaderOf(t, first)
			second := join(t, j, "b")
			dead, survivor := second, first
			if leaderDies {
				dead, survivor = first, second
			}
			g := await(t, survivor, "a and b", hasIDs("a", "b"))
			dead.Close() // a crash: its lease expires within the TTL
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if v, err := survivor.Suspect(ctx, dead.ID()); err != nil || v != Voted {
				t.Fatalf("vote against %s: %v, %v; want voted", dead.ID(), v, err)
			}
			next := await(t, survivor, "generation without "+dead.ID(), hasIDs(survivor.ID()))
			if next.Number <= g.Number || !slices.Contains(next.Left, dead.ID()) {
				t.Fatalf("generation %d (after %d) left %v, want %s", next.Number, g.Number, next.Left, dead.ID())
			}
		})
	}
}

// A sidecar starved of CPU for longer than the TTL loses its lease and is
// silent meanwhile. Silent votes from members whose trainers it holds up
// in nothing do not stop the hold: when it registers again, nothing
// changed.
func TestAMemberSilentWhileNoTrainerWaitsIsHeldWhenItsKeyTimesOut(t *testing.T) {
	j, client := testJob(t, func(c *Config) {
		c.TTL, c.ExpiryGrace, c.IdleRefuteWindow = time.Second, time.Hour, time.Hour
		c.Waiting = func() bool { return false }
	})
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	g := await(t, a, "all three", hasIDs("a", "b", "c"))
	key := j.cfg.Prefix() + record.MembersDir + "c"
	resp, err := client.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read %s: %v", key, err)
	}
	c.Close() // silent from now on; its lease expires within the TTL
	if v := suspect(t, b, "c"); v != Voted {
		t.Fatalf("b's vote against c: %s, want voted", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ev := range client.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if slices.ContainsFunc(ev.Events, func(e *clientv3.Event) bool { return e.Type == clientv3.EventTypeDelete }) {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("c's key did not time out within 10s")
	}
	putMember(t, client, j, "c", string(resp.Kvs[0].Value)) // c registers again
	join(t, j, "d")
	next := await(t, a, "generation with d", hasIDs("a", "b", "c", "d"))
	if next.Number != g.Number+1 || next.Reason != "join d" {
		t.Fatalf("generation %d %q after %d, want %d \"join d\": c's silence while no trainer waited cost a generation", next.Number, next.Reason, g.Number, g.Number+1)
	}
}

// A held member whose port refuses (Config.Exited) has exited for good:
// its place is not held until the grace ends.
func TestAHeldMemberThatExitedLeavesBeforeTheGraceEnds(t *testing.T) {
	var exited atomic.Bool
	j, client := testJob(t, func(c *Config) {
		c.TTL, c.ExpiryGrace = 60*time.Second, time.Hour
		c.Exited = func(_ context.Context, id string) bool { return id == "c" && exited.Load() }
	})
	a, _, _ := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	g := await(t, a, "all three", hasIDs("a", "b", "c"))
	timeOut(t, client, j, "c")
	exited.Store(true)
	next := await(t, a, "generation without c", hasIDs("a", "b"))
	if next.Number != g.Number+1 || !slices.Contains(next.Left, "c") {
		t.Fatalf("generation %d left %v after %d, want %d leaving c", next.Number, next.Left, g.Number, g.Number+1)
	}
}
