package coordinator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
)

func TestLeaderIgnoresItsOwnEarlierCommitDeliveredLate(t *testing.T) {
	j, _ := testJob(t)
	a := join(t, j, "a")
	gen := func(n int64) *record.Generation {
		g := &record.Generation{Number: n, WorldSize: 1, Members: []record.RankedMember{{ID: "a", Addr: "10.0.0.a", Slots: 1}}}
		g.BuildIndex()
		return g
	}
	put := func(g *record.Generation, rev int64) *clientv3.Event {
		b, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(j.genKey()), Value: b, ModRevision: rev}}
	}
	tests := []struct {
		name      string
		events    []*clientv3.Event
		wantNum   int64
		wantRev   int64
		wantFloor int64
	}{
		{
			// Two commits (rev 90, then 100) before the watch delivered the
			// first one.
			name:    "an own commit delivered after a later one is ignored",
			events:  []*clientv3.Event{put(gen(4), 90)},
			wantNum: 5, wantRev: 100,
		},
		{
			name:    "a foreign write after ours is taken",
			events:  []*clientv3.Event{put(gen(4), 90), put(gen(9), 120)},
			wantNum: 9, wantRev: 120,
		},
		{
			name: "a deleted key keeps the known generation so numbers keep growing",
			events: []*clientv3.Event{{Type: clientv3.EventTypeDelete,
				Kv: &mvccpb.KeyValue{Key: []byte(j.genKey()), ModRevision: 130}}},
			wantNum: 5, wantRev: 0, wantFloor: 130,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &leaderState{gen: gen(5), genRev: 100}
			a.applyGenerationEvents(st, tt.events)
			if st.gen.Number != tt.wantNum || st.genRev != tt.wantRev {
				t.Fatalf("leader holds generation %d at revision %d, want %d at %d", st.gen.Number, st.genRev, tt.wantNum, tt.wantRev)
			}
			if st.floor != tt.wantFloor {
				t.Fatalf("floor %d, want %d", st.floor, tt.wantFloor)
			}
		})
	}
}

// awaitNewer reads gens until a generation numbered above n satisfies ok,
// failing on an older one: members drop those forever.
func awaitNewer(t *testing.T, who string, gens <-chan *record.Generation, n int64, ok func(*record.Generation) bool) *record.Generation {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case g, open := <-gens:
			if !open {
				t.Fatalf("%s stopped while waiting for a generation above %d", who, n)
			}
			if g.Number > n && ok(g) {
				return g
			}
		case <-timeout:
			t.Fatalf("%s saw no generation above %d within 15s", who, n)
		}
	}
}

func TestGenerationNumbersGrowAfterTheKeyIsDeletedAndLeadershipMoves(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	// One job per member, as one process per pod.
	ja, jb, jc := newTestJob(t, client), newTestJob(t, client), newTestJob(t, client)
	a := join(t, ja, "a")
	leaderOf(t, a) // campaigns run in the background: let a win first
	b, c := join(t, jb, "b"), join(t, jc, "c")
	await(t, c, "all three", hasIDs("a", "b", "c"))
	ctx := context.Background()
	for range 3 {
		if err := b.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	last := await(t, c, "b's third restart", func(g *record.Generation) bool {
		m, _ := g.Member("b")
		return m.Incarnation == 3
	})
	if _, err := client.Delete(ctx, ja.genKey()); err != nil {
		t.Fatal(err)
	}
	lease := a.Lease()
	a.Close()
	if _, err := client.Revoke(ctx, lease); err != nil { // as the evictor of a dead leader would
		t.Fatal(err)
	}
	for _, m := range []*Member{b, c} {
		g := awaitNewer(t, m.ID(), m.Generations(), last.Number, hasIDs("b", "c"))
		if g.Leader == "a" {
			t.Fatalf("generation %d committed by the closed leader", g.Number)
		}
	}
	for _, j := range []*Job{jb, jc} {
		if g := j.Generation(); g.Number <= last.Number {
			t.Fatalf("job holds generation %d, want above %d", g.Number, last.Number)
		}
	}
}

func TestAFreshLeaderNumbersAboveALostGenerationKey(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	ja := newTestJob(t, client)
	a := join(t, ja, "a")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before ja closes: ja waits for its watchers
	seen := ja.Watch(ctx)
	await(t, a, "a alone", hasIDs("a"))
	for range 2 {
		if err := a.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	last := await(t, a, "a's second restart", func(g *record.Generation) bool {
		m, _ := g.Member("a")
		return m.Incarnation == 2
	})
	if _, err := client.Delete(ctx, ja.genKey()); err != nil {
		t.Fatal(err)
	}
	// b's process starts after the key is gone: it knows no generation.
	// Pending, it commits nothing while a leads.
	jb := newTestJob(t, client)
	b := join(t, jb, "b", func(i *record.MemberInfo) { i.State = record.StatePending })
	lease := a.Lease()
	a.Close()
	if _, err := client.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	leaderOf(t, b)
	if err := b.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	g := awaitNewer(t, "b", b.Generations(), 0, hasIDs("b"))
	if g.Number <= last.Number {
		t.Fatalf("fresh leader committed generation %d, want above %d", g.Number, last.Number)
	}
	// a's process (its job, and any trainer behind it) takes it.
	awaitNewer(t, "a's job", seen, last.Number, hasIDs("b"))
}

// A leader that crashes (its lease runs out, nobody evicts it) after the
// generation key was lost: the next leader must commit the ring without it
// on its own, and every survivor's view must move on.
func TestALostGenerationKeyAndACrashedLeaderLeaveTheSurvivorsARing(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	ja, jb, jc := newTestJob(t, client), newTestJob(t, client), newTestJob(t, client)
	a := join(t, ja, "a")
	leaderOf(t, a)
	b, c := join(t, jb, "b"), join(t, jc, "c")
	last := await(t, c, "all three", hasIDs("a", "b", "c"))
	ctx := context.Background()
	if _, err := client.Delete(ctx, ja.genKey()); err != nil {
		t.Fatal(err)
	}
	a.Close() // no revoke: the lease runs out, as a crashed process's does
	for _, m := range []*Member{b, c} {
		g := awaitNewer(t, m.ID(), m.Generations(), last.Number, hasIDs("b", "c"))
		if g.Leader == "a" {
			t.Fatalf("generation %d committed by the crashed leader", g.Number)
		}
	}
	for _, j := range []*Job{jb, jc} {
		if g := j.Generation(); !hasIDs("b", "c")(g) {
			t.Fatalf("job holds generation %d with %v, want b and c", g.Number, g.IDs())
		}
	}
}

// A member joins while the next leader still holds the crashed leader's
// place (its key only timed out, after the generation key was lost): the
// generation of the join may keep it, but once the hold ends the leader
// must commit the ring without it, and every member's view must move on.
func TestAJoinWhileACrashedLeaderIsHeldAfterTheKeyWasLostStillDropsIt(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	ja, jb, jc, jd := newTestJob(t, client), newTestJob(t, client), newTestJob(t, client), newTestJob(t, client)
	a := join(t, ja, "a")
	leaderOf(t, a)
	b, c := join(t, jb, "b"), join(t, jc, "c")
	last := await(t, c, "all three", hasIDs("a", "b", "c"))
	if _, err := client.Delete(context.Background(), ja.genKey()); err != nil {
		t.Fatal(err)
	}
	a.Close() // no revoke: the lease runs out, and the next leader holds a's place
	leaderOf(t, b, c)
	d := join(t, jd, "d")
	for _, m := range []*Member{b, c, d} {
		g := awaitNewer(t, m.ID(), m.Generations(), last.Number, hasIDs("b", "c", "d"))
		if g.Leader == "a" {
			t.Fatalf("generation %d committed by the crashed leader", g.Number)
		}
	}
	for _, j := range []*Job{jb, jc, jd} {
		if g := j.Generation(); g.Number <= last.Number || !hasIDs("b", "c", "d")(g) {
			t.Fatalf("job holds generation %d with %v, want one above %d with b, c and d", g.Number, g.IDs(), last.Number)
		}
	}
}

// The generation key is lost, a member that never saw it joins as
// standby (a ring change the policy refuses commits nothing), and the
// leader crashes: the survivor and the standby must form the next ring,
// numbered above the lost one.
func TestAStandbyThatNeverSawTheLostKeyTakesTheCrashedLeadersPlace(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	two := func(c *Config) { c.Policy = Policy{Min: 1, Max: 2, Unit: 1} }
	ja, jb := newTestJob(t, client, two), newTestJob(t, client, two)
	a := join(t, ja, "a")
	leaderOf(t, a)
	b := join(t, jb, "b")
	last := await(t, b, "a and b", hasIDs("a", "b"))
	if _, err := client.Delete(context.Background(), ja.genKey()); err != nil {
		t.Fatal(err)
	}
	jc := newTestJob(t, client, two)
	c := join(t, jc, "c")
	a.Close()
	for _, m := range []*Member{b, c} {
		g := awaitNewer(t, m.ID(), m.Generations(), last.Number, hasIDs("b", "c"))
		if g.Leader == "a" {
			t.Fatalf("generation %d committed by the crashed leader", g.Number)
		}
	}
	for _, j := range []*Job{jb, jc} {
		if g := j.Generation(); g.Number <= last.Number || !hasIDs("b", "c")(g) {
			t.Fatalf("job holds generation %d with %v, want one above %d with b and c", g.Number, g.IDs(), last.Number)
		}
	}
}
