package coordinator

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// electionCount follows the number of keys under the election prefix from
// rev on, recording the largest count seen, until ctx ends.
type electionCount struct {
	mu      sync.Mutex
	n, most int64
	changed chan struct{}
}

func followElection(ctx context.Context, t *testing.T, client *clientv3.Client, prefix string, rev int64) *electionCount {
	t.Helper()
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	c := &electionCount{n: resp.Count, most: resp.Count, changed: make(chan struct{})}
	wc := client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(wg.Wait)
	go func() {
		defer wg.Done()
		for wr := range wc {
			c.mu.Lock()
			for _, ev := range wr.Events {
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					c.n--
				case ev.IsCreate():
					c.n++
				}
			}
			c.most = max(c.most, c.n)
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *electionCount) now() (n, most int64, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.most, c.changed
}

// await waits until the count satisfies ok.
func (c *electionCount) await(t *testing.T, what string, ok func(int64) bool) {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		n, _, changed := c.now()
		if ok(n) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: the election holds %d keys after 15s", what, n)
		}
	}
}

func TestCandidatesStayAtTheirNumberWhenTheLeaderAndTheOtherCandidatesDie(t *testing.T) {
	// With a 30 s TTL only the revokes can explain a quick recovery.
	j, client := testJob(t, func(c *Config) { c.TTL = 30 * time.Second; c.Candidates = 3 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := ids("w", 8)
	ms := make([]*Member, len(names))
	ms[0] = join(t, j, names[0])
	leaderOf(t, ms[0]) // campaigns run in the background: let w0 win first
	for i := 1; i < len(names); i++ {
		ms[i] = join(t, j, names[i])
	}
	all := await(t, ms[7], "all eight", hasIDs(names...))
	if got := all.IDs()[:3]; got[0] != "w0" || got[1] != "w1" || got[2] != "w2" {
		t.Fatalf("ring starts %v, want the join order w0 w1 w2", got)
	}
	prefix := j.Config().Prefix() + record.ElectionDir
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	before := followElection(ctx, t, client, prefix, resp.Header.Revision)
	before.await(t, "the first ring's candidates", func(n int64) bool { return n == 3 })

	var leases []clientv3.LeaseID
	for _, m := range ms[:3] {
		leases = append(leases, m.Lease())
		m.Close() // a crash: the lease stays until someone evicts it
	}
	start := time.Now()
	for _, l := range leases { // as an evictor that confirmed the deaths would
		if _, err := client.Revoke(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	survivors := names[3:]
	g := await(t, ms[3], "generation of the survivors", hasIDs(survivors...))
	t.Logf("revokes to the survivors' generation %d (committed by %s): %s", g.Number, g.Leader, time.Since(start))

	gresp, err := client.Get(ctx, j.genKey())
	if err != nil {
		t.Fatal(err)
	}
	if len(gresp.Kvs) == 0 {
		t.Fatal("generation key missing")
	}
	after := followElection(ctx, t, client, prefix, gresp.Kvs[0].ModRevision)
	if n, _, _ := after.now(); n > 3 {
		t.Fatalf("%d election keys when the survivors' generation was committed, want at most 3", n)
	}
	// Settle: every survivor takes the generation, and one more generation
	// (a restart) goes round; the candidates are then the new ring's first.
	for _, m := range ms[4:] {
		await(t, m, "generation of the survivors", hasIDs(survivors...))
	}
	if err := ms[7].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[3:] {
		await(t, m, "generation after w7's restart", func(n *record.Generation) bool { return n.Number > g.Number })
	}
	after.await(t, "the survivors' candidates", func(n int64) bool { return n == 3 })
	cresp, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if _, most, _ := after.now(); most > 3 || cresp.Count > 3 {
		t.Fatalf("up to %d election keys after the survivors' generation, %d now; want at most 3", most, cresp.Count)
	}
}

func TestCandidacyRule(t *testing.T) {
	ring := func(leader string, ids ...string) *record.Generation {
		g := &record.Generation{Number: 3, Leader: leader}
		for i, id := range ids {
			g.Members = append(g.Members, record.RankedMember{ID: id, Addr: id, Rank: i, Slots: 1})
		}
		g.WorldSize = len(ids)
		return g
	}
	withStandby := func(g *record.Generation, ids ...string) *record.Generation {
		g.Standby = ids
		return g
	}
	// keys lists campaigners in the order their campaigns started; "me"
	// is this member's own key.
	tests := []struct {
		name     string
		me       string
		gen      *record.Generation
		keys     []string
		gone     []string // named members no longer registered
		k        int
		wantNeed bool
	}{
		{name: "the head of the ring campaigns", me: "b", gen: ring("a", "a", "b", "c", "d"),
			keys: []string{"a", "b", "c"}, wantNeed: true},
		{name: "the member behind the head waits", me: "d", gen: ring("a", "a", "b", "c", "d"),
			keys: []string{"a", "b", "c"}},
		{name: "the generation's leader is designated before the ring", me: "c", gen: ring("x", "a", "b", "c", "x"),
			keys: []string{"x", "a", "b", "c"}},
		{name: "the leader counts although last in the ring", me: "x", gen: ring("x", "a", "b", "c", "x"),
			wantNeed: true},
		{name: "a registered candidate between campaigns counts", me: "d", gen: ring("a", "a", "b", "c", "d"),
			keys: []string{"a", "b"}},
		{name: "a departed candidate is replaced by the first behind", me: "d", gen: ring("a", "a", "b", "c", "d", "e"),
			keys: []string{"a", "b"}, gone: []string{"c"}, wantNeed: true},
		{name: "the second behind counts the first as standing in", me: "e", gen: ring("a", "a", "b", "c", "d", "e"),
			keys: []string{"a", "b"}, gone: []string{"c"}},
		{name: "when all candidates die the first three survivors stand in", me: "f", gen: ring("a", "a", "b", "c", "d", "e", "f", "g"),
			gone: []string{"a", "b", "c"}, wantNeed: true},
		{name: "and the fourth does not", me: "g", gen: ring("a", "a", "b", "c", "d", "e", "f", "g"),
			gone: []string{"a", "b", "c"}},
		{name: "standby comes after the ring", me: "s", gen: withStandby(ring("a", "a", "b"), "s", "t"),
			keys: []string{"a", "b"}, wantNeed: true},
		{name: "an unnamed member waits behind the named", me: "n", gen: ring("a", "a", "b", "c"),
			keys: []string{"a"}},
		{name: "without a generation the first campaigns stay", me: "p", keys: []string{"q", "me", "r", "s"},
			wantNeed: true},
		{name: "without a generation a later campaign withdraws", me: "p", keys: []string{"q", "r", "s", "me"}},
		{name: "every member campaigns with no candidate limit", me: "z", gen: ring("a", "a", "b", "c"), k: -1,
			keys: []string{"a", "b", "c"}, wantNeed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := tt.k
			if k == 0 {
				k = 3
			} else if k < 0 {
				k = 0
			}
			j := &Job{keys: newKeyspace()}
			ks := &j.keys
			close(ks.synced)
			c := &candidacy{m: &Member{id: tt.me, job: j}, k: k, ownKey: "me", cands: newCandidates(tt.gen, k)}
			for i, id := range tt.keys {
				key := "key-" + id
				if id == "me" {
					key, id = "me", tt.me
				}
				ks.campaign[key] = campaigner{id: id, rev: int64(10 + i)}
			}
			for _, id := range c.cands.order {
				ks.registered[id] = 1 // a lease
			}
			for _, id := range tt.gone {
				delete(ks.registered, id)
			}
			need, err := c.needed(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if need != tt.wantNeed {
				t.Fatalf("needed = %v, want %v", need, tt.wantNeed)
			}
		})
	}
}

func TestSimultaneousJoinsSettleOnTheRingsCandidates(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.Candidates = 3 })
	names := ids("s", 6)
	ms := make([]*Member, len(names))
	var wg sync.WaitGroup
	for i, id := range names {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := j.Join(ctx, record.MemberInfo{ID: id, Addr: "10.0.1." + id, Slots: 1})
			if err != nil {
				t.Errorf("join %s: %v", id, err)
				return
			}
			ms[i] = m
		})
	}
	wg.Wait()
	for _, m := range ms {
		if m != nil {
			t.Cleanup(m.Close)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	g := await(t, ms[0], "all six", hasIDs(names...))
	cands := newCandidates(g, 3)
	want := slices.Sorted(slices.Values(cands.order[:cands.designated]))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // ends followElection's watch
	prefix := j.Config().Prefix() + record.ElectionDir
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	// Whoever campaigned in the rush, the campaigners converge on the
	// generation's leader and the head of its ring.
	c := followElection(ctx, t, client, prefix, resp.Header.Revision)
	c.await(t, "the ring's candidates", func(int64) bool {
		resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range resp.Kvs {
			got = append(got, string(kv.Value))
		}
		return slices.Equal(slices.Sorted(slices.Values(got)), want)
	})
	if leader := leaderOf(t, ms...); leader.ID() != g.Leader {
		t.Fatalf("%s leads, want %s, who committed generation %d", leader.ID(), g.Leader, g.Number)
	}
}

// A job learns the campaigns and registrations from its own watch, and
// tells its candidacies when they change.
func TestAJobFollowsTheCampaignsAndRegistrations(t *testing.T) {
	j, _ := testJob(t)
	changed := j.watchChanges()
	defer j.unwatchChanges(changed)
	a := join(t, j, "a")
	b := join(t, j, "b")
	await(t, a, "a and b", hasIDs("a", "b"))
	state := func() (registered []string, campaigning []string) {
		j.keys.mu.Lock()
		defer j.keys.mu.Unlock()
		for id := range j.keys.registered {
			registered = append(registered, id)
		}
		for _, cp := range j.keys.campaign {
			campaigning = append(campaigning, cp.id)
		}
		return slices.Sorted(slices.Values(registered)), slices.Sorted(slices.Values(campaigning))
	}
	until := func(what string, ok func(reg, camp []string) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			if reg, camp := state(); ok(reg, camp) {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				reg, camp := state()
				t.Fatalf("%s: registered %v, campaigning %v", what, reg, camp)
			}
		}
	}
	until("both registered, both campaigning", func(reg, camp []string) bool {
		return slices.Equal(reg, []string{"a", "b"}) && slices.Equal(camp, []string{"a", "b"})
	})
	if err := b.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	until("b gone", func(reg, camp []string) bool {
		return slices.Equal(reg, []string{"a"}) && slices.Equal(camp, []string{"a"})
	})
}
