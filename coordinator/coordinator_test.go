package coordinator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/internal/testbin"
)

func TestJoinOfNMembersCommitsOneGenerationWithAll(t *testing.T) {
	j, _ := testJob(t)
	names := ids("w", 8)
	var ms []*Member
	for _, id := range names {
		ms = append(ms, join(t, j, id))
	}
	for _, m := range ms {
		g := await(t, m, "generation of 8", hasIDs(names...))
		if g.WorldSize != 8 || g.Paused {
			t.Fatalf("world size %d paused %v, want 8 and not paused", g.WorldSize, g.Paused)
		}
		r, _ := g.Member(m.ID())
		if g.Members[r.Rank].ID != m.ID() {
			t.Fatalf("rank %d of %s does not index the ring", r.Rank, m.ID())
		}
		if g.MasterAddr != g.Members[0].Addr || g.MasterPort < 29500 || g.MasterPort >= 29516 {
			t.Fatalf("master %s:%d, want rank 0's address on a port in 29500..29515", g.MasterAddr, g.MasterPort)
		}
	}
}

func TestGracefulLeaveCommitsAtOnce(t *testing.T) {
	j, _ := testJob(t, func(c *Config) { c.TTL = 30 * time.Second })
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	g := await(t, a, "all three", hasIDs("a", "b", "c"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	// With a 30 s TTL only the revoke can explain a quick new generation.
	next := await(t, c, "generation without b", hasIDs("a", "c"))
	if next.Number != g.Number+1 {
		t.Fatalf("generation %d follows %d, want exactly one commit", next.Number, g.Number)
	}
	if !strings.Contains(next.Reason, "leave b") {
		t.Fatalf("reason %q does not name the leave", next.Reason)
	}
	for range b.Generations() {
		// drain what was delivered before the leave; the loop ends when
		// the channel is closed
	}
}

func TestCrashedMemberIsRemovedWhenItsLeaseExpires(t *testing.T) {
	j, _ := testJob(t)
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, a, "all three", hasIDs("a", "b", "c"))
	c.Close() // no revoke: the lease runs out
	await(t, b, "generation without c", hasIDs("a", "b"))
}

func TestLeaderCrashDuringCommitIsFencedOff(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	reached := make(chan *record.Generation, 1)
	release := make(chan struct{})
	result := make(chan bool, 1)
	var armed atomic.Bool
	var blocked atomic.Pointer[record.Generation]
	ja := newTestJob(t, client, func(c *Config) {
		c.hooks = &testHooks{
			beforeCommit: func(g *record.Generation) {
				if armed.Load() && blocked.CompareAndSwap(nil, g) {
					reached <- g
					<-release
				}
			},
			afterCommit: func(g *record.Generation, ok bool, err error) {
				if blocked.Load() == g {
					result <- ok
				}
			},
		}
	})
	jb := newTestJob(t, client)
	a := join(t, ja, "a")
	leaderOf(t, a) // campaigns run in the background: let a win before b runs
	b := join(t, jb, "b")
	await(t, b, "a and b", hasIDs("a", "b"))
	if leaderOf(t, a, b) != a {
		t.Fatal("a campaigned first but does not lead")
	}
	armed.Store(true) // the leader goroutine is idle; the join below wakes it
	join(t, jb, "c")
	stale := <-reached
	// a crashes in the middle of the commit: its lease is gone.
	if _, err := client.Revoke(context.Background(), a.Lease()); err != nil {
		t.Fatal(err)
	}
	won := await(t, b, "the successor's generation", hasIDs("b", "c"))
	if won.Leader != "b" {
		t.Fatalf("generation committed by %q, want b", won.Leader)
	}
	close(release)
	if <-result {
		t.Fatalf("the deposed leader committed generation %d", stale.Number)
	}
	resp, err := client.Get(context.Background(), jb.genKey())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := record.DecodeGeneration(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Leader != "b" || stored.Number != won.Number {
		t.Fatalf("stored generation %d by %s, want %d by b", stored.Number, stored.Leader, won.Number)
	}
}

func TestPolicyStandbyAndPause(t *testing.T) {
	j, _ := testJob(t, func(c *Config) {
		c.Policy = Policy{Min: 3, Max: 4, Unit: 1}
		c.TTL = 30 * time.Second
	})
	a, b := join(t, j, "a"), join(t, j, "b")
	g := await(t, a, "paused below min", hasIDs("a", "b"))
	if !g.Paused {
		t.Fatal("a generation below min is not paused")
	}
	join(t, j, "c")
	g = await(t, a, "three training", hasIDs("a", "b", "c"))
	if g.Paused || g.WorldSize != 3 {
		t.Fatalf("paused %v world %d, want a running world of 3", g.Paused, g.WorldSize)
	}
	join(t, j, "d")
	g = await(t, a, "four at max", hasIDs("a", "b", "c", "d"))
	// e does not fit: no generation is committed for it (trainers would
	// re-form for nothing); it waits as standby. That the generation lists
	// it depends on whether it joined in d's settle window, so TestPlan
	// checks the standby list.
	e := join(t, j, "e")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	// e, the standby, fills b's place.
	g = await(t, e, "standby promoted", hasIDs("a", "c", "d", "e"))
	if g.WorldSize != 4 {
		t.Fatalf("world size %d, want 4", g.WorldSize)
	}
}

func TestDrainingMemberIsExcludedAtOnce(t *testing.T) {
	j, _ := testJob(t, func(c *Config) { c.TTL = 30 * time.Second })
	a, b := join(t, j, "a"), join(t, j, "b")
	join(t, j, "c")
	g := await(t, a, "all three", hasIDs("a", "b", "c"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.SetState(ctx, record.StateDraining); err != nil {
		t.Fatal(err)
	}
	next := await(t, b, "generation without the draining b", hasIDs("a", "c"))
	if next.Number != g.Number+1 || !strings.Contains(next.Reason, "drain b") {
		t.Fatalf("generation %d (%q), want %d for drain b", next.Number, next.Reason, g.Number+1)
	}
}

func TestPendingMemberIsPlacedOnceActive(t *testing.T) {
	j, cli := testJob(t, func(c *Config) { c.TTL = 30 * time.Second })
	a := join(t, j, "a")
	join(t, j, "b")
	await(t, a, "a and b", hasIDs("a", "b"))
	pending := func(info *record.MemberInfo) { info.State = record.StatePending }
	c := join(t, j, "c", pending)
	join(t, j, "d")
	// d's join is batched with c's; the generation places d alone.
	await(t, a, "d, but not the pending c", hasIDs("a", "b", "d"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	g := await(t, a, "c once active", hasIDs("a", "b", "c", "d"))
	if !strings.Contains(g.Reason, "join c") {
		t.Errorf("reason %q, want join c", g.Reason)
	}

	// Activate never undoes a drain.
	e := join(t, j, "e", pending)
	if err := e.SetState(ctx, record.StateDraining); err != nil {
		t.Fatal(err)
	}
	if err := e.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, j.cfg.Prefix()+"members/e")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("members/e: %v, %d values", err, len(resp.Kvs))
	}
	info, err := record.DecodeMember(string(resp.Kvs[0].Key), resp.Kvs[0].Value, resp.Kvs[0].CreateRevision)
	if err != nil || info.State != record.StateDraining {
		t.Fatalf("members/e after Activate: %+v, %v; want state draining", info, err)
	}
}

func TestRanksStayStableAcrossRandomJoinsAndLeaves(t *testing.T) {
	j, _ := testJob(t, func(c *Config) { c.TTL = 30 * time.Second })
	rng := rand.New(rand.NewPCG(1, 2))
	watcher := join(t, j, "watcher")
	live := []*Member{watcher}
	prev := await(t, watcher, "first generation", hasIDs("watcher"))
	for i := range 20 {
		var want []string
		if len(live) > 1 && rng.IntN(2) == 0 {
			k := 1 + rng.IntN(len(live)-1)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := live[k].Leave(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			live = slices.Delete(live, k, k+1)
		} else {
			live = append(live, join(t, j, fmt.Sprintf("m%d", i), func(info *record.MemberInfo) {
				info.Topology = []string{fmt.Sprintf("zone-%d", rng.IntN(3))}
			}))
		}
		for _, m := range live {
			want = append(want, m.ID())
		}
		g := await(t, watcher, fmt.Sprintf("step %d", i), hasIDs(want...))
		var kept, order []string
		for _, id := range prev.IDs() {
			if _, ok := g.Member(id); ok {
				kept = append(kept, id)
			}
		}
		for _, id := range g.IDs() {
			if _, ok := prev.Member(id); ok {
				order = append(order, id)
			}
		}
		if !slices.Equal(kept, order) {
			t.Fatalf("step %d reordered survivors: %v became %v", i, kept, order)
		}
		prev = g
	}
}

func TestEtcdRestartCausesNoSpuriousGeneration(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	j := newTestJob(t, client, func(c *Config) { c.TTL = 10 * time.Second })
	names := []string{"a", "b", "c"}
	var ms []*Member
	leases := map[string]clientv3.LeaseID{}
	for _, id := range names {
		m := join(t, j, id)
		ms = append(ms, m)
		leases[id] = m.Lease()
	}
	before := await(t, ms[0], "all three", hasIDs(names...))

	cfg := srv.Config()
	t.Log("closing etcd")
	srv.Close()
	t.Log("restarting etcd")
	etcdtest.Restart(t, cfg)
	t.Log("etcd restarted")

	// A real change after the restart: its generation must directly follow
	// the one from before.
	d := join(t, j, "d")
	t.Log("d joined")
	after := await(t, d, "generation with d", hasIDs("a", "b", "c", "d"))
	if after.Number != before.Number+1 {
		t.Fatalf("generation %d after the restart, want %d: a spurious generation was committed", after.Number, before.Number+1)
	}
	for _, m := range ms {
		g := await(t, m, "generation with d", hasIDs("a", "b", "c", "d"))
		if g.Number != after.Number {
			t.Fatalf("%s holds generation %d, want %d", m.ID(), g.Number, after.Number)
		}
		if m.Lease() != leases[m.ID()] {
			t.Fatalf("%s registered again across the restart", m.ID())
		}
	}
}

func TestMalformedValuesAreReportedAndIgnored(t *testing.T) {
	rec := &testbin.Buffer{}
	j, client := testJob(t, func(c *Config) { c.Logger = warnLogger(rec) })
	a := join(t, j, "a")
	g := await(t, a, "a alone", hasIDs("a"))
	ctx := context.Background()
	prefix := j.Config().Prefix()
	for key, value := range map[string]string{
		prefix + "members/garbage":  "{not json",
		prefix + "members/noslots":  `{"id":"noslots","addr":"x","slots":0,"state":"active"}`,
		prefix + "members/mismatch": `{"id":"other","addr":"x","slots":1,"state":"active"}`,
		prefix + "members/badstate": `{"id":"badstate","addr":"x","slots":1,"state":"sleepy"}`,
	} {
		if _, err := client.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Put(ctx, prefix+"generation", `{"number": "seven"}`); err != nil {
		t.Fatal(err)
	}
	b := join(t, j, "b")
	next := await(t, b, "a and b only", hasIDs("a", "b"))
	if next.Number <= g.Number {
		t.Fatalf("generation number went from %d to %d", g.Number, next.Number)
	}
	if n := j.BadValues(); n < 5 {
		t.Fatalf("%d bad values reported, want at least 5", n)
	}
	for _, want := range []string{"members/garbage", "members/noslots", "members/mismatch", "members/badstate", "generation"} {
		if !strings.Contains(rec.String(), want) {
			t.Errorf("log does not report %s:\n%s", want, rec.String())
		}
	}
}

func TestRestartCommitsTheSameMembersAgain(t *testing.T) {
	j, _ := testJob(t, func(c *Config) { c.TTL = 60 * time.Second })
	a, b := join(t, j, "a"), join(t, j, "b")
	g := await(t, a, "both", hasIDs("a", "b"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	next := await(t, a, "generation after b's restart", func(n *record.Generation) bool { return n.Number > g.Number })
	if !slices.Equal(next.IDs(), g.IDs()) || !strings.Contains(next.Reason, "restart b") {
		t.Fatalf("generation %v (%q), want the same ring %v for restart b", next.IDs(), next.Reason, g.IDs())
	}
	if m, _ := next.Member("b"); m.Incarnation != 1 {
		t.Fatalf("b's incarnation %d, want 1", m.Incarnation)
	}
}
