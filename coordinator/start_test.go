package coordinator

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
)

func TestStartOpen(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	window := 30 * time.Second
	member := func(id string, slots int, activeFor time.Duration) record.MemberInfo {
		return record.MemberInfo{ID: id, Slots: slots, State: record.StateActive, ActiveSince: t0.Add(-activeFor)}
	}
	members := func(ms ...record.MemberInfo) map[string]record.MemberInfo {
		out := map[string]record.MemberInfo{}
		for _, m := range ms {
			out[m.ID] = m
		}
		return out
	}
	tests := []struct {
		name     string
		expected int
		window   time.Duration
		min      int
		members  map[string]record.MemberInfo
		seen     map[string]time.Time
		wantOpen bool
		wantEnd  time.Time
	}{
		{name: "without an expected size the start does not wait", window: window, min: 1,
			members: members(member("a", 1, 0)), wantOpen: true},
		{name: "a window of 0 does not wait", expected: 3, min: 1,
			members: members(member("a", 1, 0)), wantOpen: true},
		{name: "the expected size in opens it at once", expected: 3, window: window, min: 1,
			members: members(member("a", 1, 0), member("b", 2, 0)), wantOpen: true},
		{name: "below min the window has not opened", expected: 4, window: window, min: 2,
			members: members(member("a", 1, time.Minute))},
		{name: "the window opens when min slots are in", expected: 4, window: window, min: 2,
			members: members(member("a", 1, 20*time.Second), member("b", 1, 10*time.Second), member("c", 1, 0)),
			wantEnd: t0.Add(20 * time.Second)},
		{name: "slots count, not members", expected: 8, window: window, min: 4,
			members: members(member("a", 2, 20*time.Second), member("b", 2, 10*time.Second), member("c", 2, 5*time.Second)),
			wantEnd: t0.Add(20 * time.Second)},
		{name: "the window's end opens it with fewer", expected: 4, window: window, min: 1,
			members: members(member("a", 1, window), member("b", 1, 0)), wantOpen: true, wantEnd: t0},
		{name: "pending and draining members do not count", expected: 3, window: window, min: 1,
			members: members(member("a", 1, 0),
				record.MemberInfo{ID: "b", Slots: 1, State: record.StatePending},
				record.MemberInfo{ID: "c", Slots: 1, State: record.StateDraining, ActiveSince: t0.Add(-time.Hour)}),
			wantEnd: t0.Add(window)},
		{name: "a clock far ahead counts from when the leader saw the member", expected: 3, window: window, min: 1,
			members: members(member("a", 1, -time.Hour)), seen: map[string]time.Time{"a": t0.Add(-5 * time.Second)},
			wantEnd: t0.Add(25 * time.Second)},
		{name: "a record without the time counts from when the leader saw it", expected: 3, window: window, min: 1,
			members: members(record.MemberInfo{ID: "a", Slots: 1, State: record.StateActive}),
			seen:    map[string]time.Time{"a": t0.Add(-5 * time.Second)}, wantEnd: t0.Add(25 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{ExpectedSize: tt.expected, StartWindow: tt.window, Policy: Policy{Min: tt.min, Unit: 1}}
			open, end := c.startOpen(tt.members, tt.seen, t0)
			if open != tt.wantOpen || !end.Equal(tt.wantEnd) {
				t.Fatalf("startOpen = %v, %v; want %v, %v", open, end, tt.wantOpen, tt.wantEnd)
			}
		})
	}
}

// heldBack is a first generation the leader held back for the start
// window, which ends at end.
type heldBack struct {
	next *record.Generation
	end  time.Time
}

// startJob is a job whose start waits for expected members; each time
// its leader holds the first generation back it says so on the returned
// channel.
func startJob(t *testing.T, client *clientv3.Client, expected int, window time.Duration, mutate ...func(*Config)) (*Job, <-chan heldBack) {
	t.Helper()
	waits := make(chan heldBack, 64)
	return newTestJob(t, client, append([]func(*Config){func(c *Config) {
		c.ExpectedSize, c.StartWindow = expected, window
		c.hooks = &testHooks{startWaits: func(next *record.Generation, end time.Time) {
			select {
			case waits <- heldBack{next, end}:
			default:
			}
		}}
	}}, mutate...)...), waits
}

// generationVersion returns how many times the generation key was
// written: 1 when exactly one generation was ever committed.
func generationVersion(t *testing.T, client *clientv3.Client, j *Job) int64 {
	t.Helper()
	resp, err := client.Get(context.Background(), j.genKey())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the generation: %v (%d keys)", err, len(resp.Kvs))
	}
	return resp.Kvs[0].Version
}

// awaitHeldBack waits until the leader holds back a first generation that
// ok accepts, and returns when the start window ends.
func awaitHeldBack(t *testing.T, waits <-chan heldBack, what string, ok func(*record.Generation) bool) time.Time {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case h := <-waits:
			if ok(h.next) {
				return h.end
			}
		case <-timeout:
			t.Fatalf("the leader did not hold back %s within 15s", what)
		}
	}
}

func TestFirstGenerationWaitsForTheExpectedSize(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	j, waits := startJob(t, client, 3, 30*time.Second)
	a := join(t, j, "a")
	join(t, j, "b")
	awaitHeldBack(t, waits, "a and b", hasIDs("a", "b"))
	join(t, j, "c")
	await(t, a, "the expected three", hasIDs("a", "b", "c"))
	if n := generationVersion(t, client, j); n != 1 {
		t.Fatalf("the generation key was written %d times, want once: the three's", n)
	}
}

func TestFirstGenerationFormsWithFewerWhenTheStartWindowEnds(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	const window = time.Second
	j, _ := startJob(t, client, 3, window)
	start := time.Now()
	a := join(t, j, "a")
	join(t, j, "b")
	g := await(t, a, "a and b at the window's end", hasIDs("a", "b"))
	if took := time.Since(start); took < window {
		t.Fatalf("the first generation formed %s after the first join, before the start window of %s ended", took, window)
	}
	if n := generationVersion(t, client, j); n != 1 || g.Paused {
		t.Fatalf("the generation key was written %d times, the generation paused %v: want once, training", n, g.Paused)
	}
}

// A leader elected during the start takes the window from the member
// records: it neither starts it over nor forgets it.
func TestANewLeaderKeepsTheStartWindowOfTheOldOne(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	const window, left = 30 * time.Second, 5 * time.Second
	ja, waits := startJob(t, client, 4, window)
	jb, _ := startJob(t, client, 4, window)
	// The members have been active for most of the window already, as if
	// the start had been going on before: a leader that started the
	// window over would take 30 s from its election.
	opened := time.Now().Add(left - window)
	since := func(info *record.MemberInfo) { info.ActiveSince = opened }
	a := join(t, ja, "a", since)
	leaderOf(t, a)
	b, _ := join(t, jb, "b", since), join(t, jb, "c", since)
	end := awaitHeldBack(t, waits, "a, b and c", hasIDs("a", "b", "c"))
	if want := opened.Add(window); !end.Equal(want) {
		t.Fatalf("the first leader's window ends at %s, want %s", end, want)
	}
	lease := a.Lease()
	a.Close() // the leader crashes, and is evicted
	if _, err := client.Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	g := await(t, b, "b and c at the window's end", hasIDs("b", "c"))
	if now := time.Now(); now.Before(end) {
		t.Fatalf("the new leader formed the first generation %s before the window's end", end.Sub(now))
	}
	if n := generationVersion(t, client, jb); n != 1 || g.Leader == "a" {
		t.Fatalf("the generation key was written %d times, last by %s: want once, by the new leader", n, g.Leader)
	}
}

// restartJob is a job of three members in restart mode past its start,
// whose joins are batched for restartSettle.
func restartJob(t *testing.T, restartSettle time.Duration) (*Job, []*Member) {
	t.Helper()
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	j, _ := startJob(t, client, 3, 30*time.Second, func(c *Config) {
		c.TTL = 30 * time.Second
		c.RestartSettle = restartSettle
	})
	restart := func(info *record.MemberInfo) { info.RestartMode = true }
	ms := []*Member{join(t, j, "a", restart), join(t, j, "b", restart), join(t, j, "c", restart)}
	await(t, ms[0], "the three", hasIDs("a", "b", "c"))
	return j, ms
}

func TestRestartModeBatchesJoinsOverTheRestartSettle(t *testing.T) {
	const restartSettle = 1500 * time.Millisecond
	j, ms := restartJob(t, restartSettle)
	joined := time.Now()
	join(t, j, "d", func(info *record.MemberInfo) { info.RestartMode = true })
	await(t, ms[0], "d's join", hasIDs("a", "b", "c", "d"))
	if took := time.Since(joined); took < restartSettle {
		t.Fatalf("d's join was committed after %s, within the restart settle window of %s", took, restartSettle)
	}
}

// With a join batched for a restart settle window longer than the test,
// a death and a drain are each committed at once.
func TestRestartModeDelaysNoDeathOrDrain(t *testing.T) {
	j, ms := restartJob(t, time.Hour)
	a, b, c := ms[0], ms[1], ms[2]
	join(t, j, "d", func(info *record.MemberInfo) { info.RestartMode = true })
	b.Close() // a crash: its lease lives on for 30 s, nobody refutes
	if v := suspect(t, a, "b"); v != Voted {
		t.Fatalf("the first vote: %s, want voted", v)
	}
	if v := suspect(t, c, "b"); v != Evicted {
		t.Fatalf("the second vote: %s, want evicted", v)
	}
	await(t, a, "the ring without the dead b", func(g *record.Generation) bool {
		_, in := g.Member("b")
		return !in
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.SetState(ctx, record.StateDraining); err != nil {
		t.Fatal(err)
	}
	await(t, a, "the ring without the draining c", func(g *record.Generation) bool {
		_, in := g.Member("c")
		return !in
	})
}
