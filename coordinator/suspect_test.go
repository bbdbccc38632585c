package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

func suspect(t *testing.T, voter *Member, target string) Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := voter.Suspect(ctx, target)
	if err != nil {
		t.Fatalf("%s suspects %s: %v", voter.ID(), target, err)
	}
	return v
}

// leaseOf returns the lease and create revision of members/<id>, or
// zeros when it is not registered.
func leaseOf(t *testing.T, client *clientv3.Client, j *Job, id string) (lease, created int64) {
	t.Helper()
	resp, err := client.Get(context.Background(), j.cfg.Prefix()+record.MembersDir+id)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0
	}
	return resp.Kvs[0].Lease, resp.Kvs[0].CreateRevision
}

// awaitVoteGone waits until voter's vote against target is deleted.
func awaitVoteGone(t *testing.T, client *clientv3.Client, j *Job, target, voter string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := j.cfg.Prefix() + record.VoteKey(target, voter)
	for {
		resp, err := client.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("%s's vote against %s not cleared: %v", voter, target, err)
		}
		if resp.Count == 0 {
			return
		}
		w := client.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-w:
		case <-ctx.Done():
			t.Fatalf("%s's vote against %s not cleared within 10s", voter, target)
		}
	}
}

// A crashed leader is evicted by two votes of other members, not by one,
// and the next leader commits the generation without it.
func TestTwoVotesEvictADeadLeaderOneDoesNot(t *testing.T) {
	// An eviction is acted on at once, whatever the expiry grace.
	j, client := testJob(t, func(c *Config) { c.TTL, c.ExpiryGrace = 60*time.Second, time.Hour })
	a := join(t, j, "a")
	leaderOf(t, a)
	b, c := join(t, j, "b"), join(t, j, "c")
	await(t, c, "all three", hasIDs("a", "b", "c"))
	a.Close() // a crash: the lease lives on for 60 s, nobody refutes

	if v := suspect(t, b, "a"); v != Voted {
		t.Fatalf("the first vote: %s, want voted", v)
	}
	if lease, _ := leaseOf(t, client, j, "a"); lease == 0 {
		t.Fatal("one vote evicted a")
	}
	if v := suspect(t, c, "a"); v != Evicted {
		t.Fatalf("the second vote: %s, want evicted", v)
	}
	g := await(t, b, "generation without a", hasIDs("b", "c"))
	if g.Leader != "b" && g.Leader != "c" {
		t.Fatalf("generation committed by %q, want the next leader, b or c", g.Leader)
	}
	if v := suspect(t, b, "a"); v != Gone {
		t.Fatalf("a vote against an evicted member: %s, want gone", v)
	}
}

// A member that still reaches etcd deletes the votes against it, so two
// peers that cannot reach it over gossip never evict it.
func TestALiveMemberRefutesVotes(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL = 60 * time.Second })
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	g := await(t, a, "all three", hasIDs("a", "b", "c"))
	lease, created := leaseOf(t, client, j, "c")

	if v := suspect(t, a, "c"); v != Voted {
		t.Fatalf("the first vote: %s, want voted", v)
	}
	awaitVoteGone(t, client, j, "c", "a")
	if v := suspect(t, b, "c"); v != Voted {
		t.Fatalf("a vote after c refuted the first: %s, want voted", v)
	}
	awaitVoteGone(t, client, j, "c", "b")
	if l, cr := leaseOf(t, client, j, "c"); l != lease || cr != created {
		t.Fatalf("c's registration changed from lease %x rev %d to %x rev %d", lease, created, l, cr)
	}
	if now := j.Generation(); now.Number != g.Number {
		t.Fatalf("generation %d committed (%s), want none after %d", now.Number, now.Reason, g.Number)
	}
	_ = c
}

// A vote cast against a pod's previous incarnation (a late death notice)
// counts nothing against the replacement registered under the same id.
func TestAVoteAgainstAnEarlierIncarnationSparesItsReplacement(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL = 60 * time.Second })
	a, b := join(t, j, "a"), join(t, j, "b")
	c := join(t, j, "c")
	await(t, a, "all three", hasIDs("a", "b", "c"))
	old, _ := leaseOf(t, client, j, "c")
	c.Close()
	if v := suspect(t, a, "c"); v != Voted {
		t.Fatalf("the vote against the old incarnation: %s, want voted", v)
	}
	// The old incarnation goes (its lease is revoked as its replacement
	// would find it gone), and the replacement registers.
	if _, err := client.Revoke(context.Background(), clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	join(t, j, "c")
	replacement, _ := leaseOf(t, client, j, "c")
	if v := suspect(t, b, "c"); v != Voted {
		t.Fatalf("a vote against the replacement with a stale one beside it: %s, want voted", v)
	}
	awaitVoteGone(t, client, j, "c", "b") // the live replacement refutes b's vote
	if l, _ := leaseOf(t, client, j, "c"); l != replacement {
		t.Fatalf("c's registration is on lease %x, want the replacement's %x", l, replacement)
	}
}

// In a job of two there is no second observer: a vote never evicts.
func TestInAJobOfTwoAVoteNeverEvicts(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL = 60 * time.Second })
	a, b := join(t, j, "a"), join(t, j, "b")
	await(t, a, "both", hasIDs("a", "b"))
	b.Close()
	for range 2 {
		if v := suspect(t, a, "b"); v != Voted {
			t.Fatalf("a lone vote: %s, want voted", v)
		}
	}
	if lease, _ := leaseOf(t, client, j, "b"); lease == 0 {
		t.Fatal("a lone vote evicted b")
	}
}

func TestWatchVotesDeliversVotes(t *testing.T) {
	j, _ := testJob(t, func(c *Config) { c.TTL = 60 * time.Second })
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, a, "all three", hasIDs("a", "b", "c"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	votes := j.WatchVotes(ctx)
	c.Close()
	if v := suspect(t, b, "c"); v != Voted {
		t.Fatalf("vote: %s", v)
	}
	select {
	case e := <-votes:
		if e.Target != "c" || e.Voter != "b" || e.Lease == 0 {
			t.Fatalf("vote event %+v, want b against c", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no vote event within 10s")
	}
	cancel()
	for range votes {
	}
}

// Two observers that vote at the same moment against a live member (both
// on one side of a gossip partition) do not evict it: the quorum must
// stand for the refute window, and the member deletes the votes first.
func TestSimultaneousVotesAgainstALiveMemberDoNotEvictIt(t *testing.T) {
	j, client := testJob(t, func(c *Config) {
		c.TTL = 60 * time.Second
		// A loaded member: each refutation takes 10 ms, a fifth of the
		// window.
		c.hooks = &testHooks{beforeRefute: func() { time.Sleep(10 * time.Millisecond) }}
	})
	a, b, _ := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, a, "all three", hasIDs("a", "b", "c"))
	lease, created := leaseOf(t, client, j, "c")
	for round := range 5 {
		verdicts := make(chan Verdict, 2)
		for _, voter := range []*Member{a, b} {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				v, err := voter.Suspect(ctx, "c")
				if err != nil {
					t.Errorf("%s suspects c: %v", voter.ID(), err)
				}
				verdicts <- v
			}()
		}
		for range 2 {
			if v := <-verdicts; v != Voted {
				t.Fatalf("round %d: a vote against live c: %s, want voted", round, v)
			}
		}
		awaitVoteGone(t, client, j, "c", "a")
		awaitVoteGone(t, client, j, "c", "b")
	}
	if l, cr := leaseOf(t, client, j, "c"); l != lease || cr != created {
		t.Fatalf("c's registration changed from lease %x rev %d to %x rev %d", lease, created, l, cr)
	}
}

// A vote that found the process gone skips the refute window, not the
// second voter.
func TestAGoneVoteStillNeedsASecondVoter(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL, c.RefuteWindow = 60*time.Second, time.Hour })
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, a, "all three", hasIDs("a", "b", "c"))
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := a.SuspectGone(ctx, "c"); err != nil || v != Voted {
		t.Fatalf("a lone gone vote: %s, %v; want voted", v, err)
	}
	if lease, _ := leaseOf(t, client, j, "c"); lease == 0 {
		t.Fatal("a lone gone vote evicted c")
	}
	// With the window an hour long, only the gone vote lets this return.
	if v, err := b.Suspect(ctx, "c"); err != nil || v != Evicted {
		t.Fatalf("the second vote: %s, %v; want evicted", v, err)
	}
}

// A live member that takes longer than the refute window to refute (a
// stalled process) is evicted when it is the only one silent, and spared
// when silent votes stand against another member too: the longer window
// covers a stall several members share.
func TestCorrelatedWaitGrowsWithTheMembersSilentTogether(t *testing.T) {
	c := Config{TTL: 3 * time.Second, CorrelatedRefuteWindow: time.Second}
	for others, want := range map[int]time.Duration{
		0: 0, 1: time.Second, CorrelatedStep - 1: time.Second, CorrelatedStep: 2 * time.Second,
		2 * CorrelatedStep: 3 * time.Second, 100: 3 * time.Second, // the TTL bounds it
	} {
		if got := c.CorrelatedWait(others); got != want {
			t.Errorf("CorrelatedWait(%d) = %v, want %v", others, got, want)
		}
	}
}

// Members that many others fall silent with are given longer to refute:
// a stall that many share lasts longer.
func TestSilentVotesAgainstManyMembersWaitLonger(t *testing.T) {
	for _, tc := range []struct {
		name        string
		others      int
		wantEvicted bool
	}{
		{"one other suspect", 1, true},
		{"as many others as a step", CorrelatedStep, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, client := testJob(t, func(c *Config) {
				c.TTL = 60 * time.Second
				c.RefuteWindow, c.CorrelatedRefuteWindow = 100*time.Millisecond, 500*time.Millisecond
				// Every refutation comes 750 ms late: past the correlated
				// window, inside twice it.
				c.hooks = &testHooks{beforeRefute: func() { time.Sleep(750 * time.Millisecond) }}
			})
			ids := []string{"a", "b", "c"}
			for i := range tc.others {
				ids = append(ids, fmt.Sprintf("x%d", i))
			}
			ms := map[string]*Member{}
			for _, id := range ids {
				ms[id] = join(t, j, id)
			}
			await(t, ms["a"], "everyone", hasIDs(ids...))
			for _, id := range ids[3:] {
				ms[id].Close() // silent for good: the votes against them stand
				if v := suspect(t, ms["a"], id); v != Voted {
					t.Fatalf("a's vote against %s: %s, want voted", id, v)
				}
			}
			lease, _ := leaseOf(t, client, j, "c")
			if v := suspect(t, ms["a"], "c"); v != Voted {
				t.Fatalf("the first vote against c: %s, want voted", v)
			}
			v := suspect(t, ms["b"], "c")
			now, _ := leaseOf(t, client, j, "c")
			if evicted := v == Evicted; evicted != tc.wantEvicted || (now != lease) == !evicted {
				t.Fatalf("the second vote against c: %s, c's lease %x -> %x; want evicted %v", v, lease, now, tc.wantEvicted)
			}
		})
	}
}

func TestSilentVotesAgainstSeveralMembersWaitTheCorrelatedWindow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		othersVoted bool
		// unreachable: whose vote against c found its node unreachable.
		unreachable map[string]bool
		wantEvicted bool
	}{
		{"alone", false, nil, true},
		{"with another suspect", true, nil, false},
		{"with another suspect, every voter finding its node unreachable (a partition)", true, map[string]bool{"a": true, "b": true}, true},
		{"with another suspect, one voter finding its node unreachable", true, map[string]bool{"b": true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, client := testJob(t, func(c *Config) {
				c.TTL = 60 * time.Second
				c.RefuteWindow, c.CorrelatedRefuteWindow = 100*time.Millisecond, 3*time.Second
				// Every refutation comes 600 ms late: past the refute
				// window, well inside the correlated one.
				c.hooks = &testHooks{beforeRefute: func() { time.Sleep(600 * time.Millisecond) }}
			})
			a, b, _, d := join(t, j, "a"), join(t, j, "b"), join(t, j, "c"), join(t, j, "d")
			await(t, a, "all four", hasIDs("a", "b", "c", "d"))
			lease, _ := leaseOf(t, client, j, "c")
			if tc.othersVoted {
				d.Close() // silent for good: the vote against it stands
				if v := suspect(t, a, "d"); v != Voted {
					t.Fatalf("a's vote against d: %s, want voted", v)
				}
			}
			cast := func(voter *Member) Verdict {
				if !tc.unreachable[voter.ID()] {
					return suspect(t, voter, "c")
				}
				v, err := voter.SuspectUnreachable(context.Background(), "c")
				if err != nil {
					t.Fatalf("%s suspects c: %v", voter.ID(), err)
				}
				return v
			}
			if v := cast(a); v != Voted {
				t.Fatalf("the first vote against c: %s, want voted", v)
			}
			v := cast(b)
			now, _ := leaseOf(t, client, j, "c")
			if evicted := v == Evicted; evicted != tc.wantEvicted || (now != lease) == !evicted {
				t.Fatalf("the second vote against c: %s, c's lease %x -> %x; want evicted %v", v, lease, now, tc.wantEvicted)
			}
		})
	}
}

// A voter repeats its vote while the suspicion lasts (Suspect overwrites
// it); a repeat that comes while another voter waits out the refute
// window must not make that voter's eviction fail and the window start
// again from the repeat: in `bench partition` each repeat pushed a
// partitioned member's eviction back, and the majority trained again
// 2.5 s after the cut instead of 1.6 s.
func TestARepeatedVoteDoesNotRestartTheRefuteWindow(t *testing.T) {
	var (
		j        *Job
		b        *Member
		repeated bool
	)
	j, _ = testJob(t, func(c *Config) {
		c.TTL, c.RefuteWindow = 60*time.Second, 300*time.Millisecond
		c.hooks = &testHooks{refuteWait: func(suspect string, _ time.Time) {
			if repeated {
				return
			}
			repeated = true
			// What b's next Suspect call stores: the same vote again.
			key := j.cfg.Prefix() + record.VoteKey(suspect, b.ID())
			resp, err := j.client.Get(context.Background(), key)
			if err != nil || len(resp.Kvs) == 0 {
				t.Errorf("b's vote against %s: %v, %d keys", suspect, err, len(resp.Kvs))
				return
			}
			if _, err := j.client.Put(context.Background(), key, string(resp.Kvs[0].Value), clientv3.WithLease(b.Lease())); err != nil {
				t.Error(err)
			}
		}}
	})
	a := join(t, j, "a")
	b = join(t, j, "b")
	c := join(t, j, "c")
	await(t, c, "all three", hasIDs("a", "b", "c"))
	a.Close() // silent from now on: nobody refutes

	if v := suspect(t, b, "a"); v != Voted {
		t.Fatalf("the first vote: %s, want voted", v)
	}
	if v := suspect(t, c, "a"); v != Evicted {
		t.Fatalf("the second vote, b's repeated during its refute window: %s, want evicted", v)
	}
	if !repeated {
		t.Fatal("the refute window was never waited")
	}
	await(t, b, "generation without a", hasIDs("b", "c"))
}

// The refute window counts from when the first vote of the quorum was
// seen, not from the vote that completed it: the suspect saw that vote
// as early and could refute it all along, and a second voter's check
// (one probe timeout for a stopped process) no longer adds to the time a
// stopped trainer costs the job.
func TestTheRefuteWindowCountsFromTheFirstVote(t *testing.T) {
	since := make(chan time.Time, 1)
	j, _ := testJob(t, func(c *Config) {
		c.TTL, c.RefuteWindow = 60*time.Second, 300*time.Millisecond
		c.hooks = &testHooks{refuteWait: func(_ string, at time.Time) { since <- at }}
	})
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, b, "all three", hasIDs("a", "b", "c"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	votes := j.WatchVotes(ctx)
	a.Close() // silent from now on: nobody refutes

	if v := suspect(t, b, "a"); v != Voted {
		t.Fatalf("the first vote: %s, want voted", v)
	}
	select {
	case <-votes:
	case <-time.After(10 * time.Second):
		t.Fatal("b's vote was never seen")
	}
	seen := time.Now() // b's vote was seen before this
	if v := suspect(t, c, "a"); v != Evicted {
		t.Fatalf("the second vote: %s, want evicted", v)
	}
	if at := <-since; !at.Before(seen) {
		t.Fatalf("the refute window counted from %v, after the first vote was seen (before %v)", at.Format(time.StampMicro), seen.Format(time.StampMicro))
	}
}

// A voter that went unscheduled lately (LocalLag) gives a silent suspect
// twice that long more to refute: on a host where processes wait that long
// for a core, the suspect may be one of them.
func TestTheRefuteWindowGrowsWithTheVotersLag(t *testing.T) {
	const window, lag = 100 * time.Millisecond, 400 * time.Millisecond
	j, _ := testJob(t, func(c *Config) {
		c.TTL, c.RefuteWindow = 60*time.Second, window
		c.LocalLag = func() time.Duration { return lag }
	})
	if got, want := j.cfg.RefuteWait(true), window+2*lag; got != want {
		t.Fatalf("RefuteWait %s, want %s", got, want)
	}
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, b, "all three", hasIDs("a", "b", "c"))
	a.Close() // silent from now on: nobody refutes

	if took := quorumAgainst(t, "a", b, c, nil); took < window+2*lag {
		t.Fatalf("evicted %s after the first vote, before the window of %s", took, window+2*lag)
	}
}

// A silent quorum whose voters' trainers all keep stepping holds nobody up:
// it waits IdleRefuteWindow, long enough for a sidecar starved of CPU to
// come back, and one vote from a voter whose trainer waits brings the
// eviction down to RefuteWindow.
func TestASilenceThatHoldsUpNoTrainerWaitsTheIdleWindow(t *testing.T) {
	const window, idle = 100 * time.Millisecond, 2 * time.Second
	var waiting atomic.Bool
	j, _ := testJob(t, func(c *Config) {
		c.TTL, c.RefuteWindow, c.IdleRefuteWindow = 60*time.Second, window, idle
		c.Waiting = waiting.Load
	})
	a, b, c, d := join(t, j, "a"), join(t, j, "b"), join(t, j, "c"), join(t, j, "d")
	await(t, b, "all four", hasIDs("a", "b", "c", "d"))
	a.Close() // silent from now on: nobody refutes

	if took := quorumAgainst(t, "a", b, c, nil); took < idle {
		t.Fatalf("evicted %s after the first vote, before the idle window of %s, though no trainer waited", took, idle)
	}
	await(t, b, "generation without a", hasIDs("b", "c", "d"))

	b.Close() // silent too; this time c's trainer waits
	if took := quorumAgainst(t, "b", c, d, func() { waiting.Store(true) }); took >= idle {
		t.Fatalf("evicted %s after the first vote, though a voter's trainer waited (refute window %s)", took, window)
	}
	await(t, c, "generation without b", hasIDs("c", "d"))

	// A trainer held up while the quorum waits ends the wait.
	e := join(t, j, "e")
	await(t, c, "e in", hasIDs("c", "d", "e"))
	waiting.Store(false)
	e.Close()
	held := func() { time.AfterFunc(idle/4, func() { waiting.Store(true) }) }
	if took := quorumAgainst(t, "e", c, d, held); took >= idle {
		t.Fatalf("evicted %s after the first vote, though the voter's trainer was held up after %s", took, idle/4)
	}
}

// A killed process whose sockets the kernel has not closed yet looks
// frozen: its votes are silent. Once its port refuses (Config.Exited), the
// quorum stops waiting and evicts it.
func TestASilentMemberFoundExitedIsEvictedAtOnce(t *testing.T) {
	const idle, exitAfter = 20 * time.Second, 300 * time.Millisecond
	var exited atomic.Bool
	j, _ := testJob(t, func(c *Config) {
		c.TTL, c.RefuteWindow, c.IdleRefuteWindow = 60*time.Second, 100*time.Millisecond, idle
		c.Waiting = func() bool { return false }
		c.Exited = func(_ context.Context, id string) bool { return id == "a" && exited.Load() }
	})
	a, b, c := join(t, j, "a"), join(t, j, "b"), join(t, j, "c")
	await(t, b, "all three", hasIDs("a", "b", "c"))
	a.Close()
	exits := func() { time.AfterFunc(exitAfter, func() { exited.Store(true) }) }
	if took := quorumAgainst(t, "a", b, c, exits); took < exitAfter || took >= idle {
		t.Fatalf("evicted %s after the first vote; want after the exit (%s) and before the idle window (%s)", took, exitAfter, idle)
	}
	await(t, b, "generation without a", hasIDs("b", "c"))
}

// A member is shown the votes against itself (to refute them) and against
// the Checkers+1 members before it in the ring (it checks them on another's
// vote), no others: every member woken by every vote held up, at 128
// members on two cores, the very eviction the votes were for.
func TestAMemberSeesOnlyTheVotesItActsOn(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.TTL = 60 * time.Second })
	others := newTestJob(t, client, func(c *Config) { c.TTL = 60 * time.Second })
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	ms := map[string]*Member{}
	for _, id := range ids {
		if id == "e" {
			ms[id] = join(t, j, id)
		} else {
			ms[id] = join(t, others, id)
		}
	}
	g := await(t, ms["e"], "all eight", hasIDs(ids...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	votes := j.WatchVotes(ctx)

	n := len(g.Members)
	i := slices.IndexFunc(g.Members, func(m record.RankedMember) bool { return m.ID == "e" })
	far, near := g.Members[(i+1)%n].ID, g.Members[(i-1+n)%n].ID // e checks its predecessors only
	voter := g.Members[(i+4)%n].ID
	for _, target := range []string{far, near} {
		if v := suspect(t, ms[voter], target); v != Voted {
			t.Fatalf("%s's vote against %s: %s, want voted", voter, target, v)
		}
	}
	select {
	case e := <-votes:
		if e.Target != near {
			t.Fatalf("e was shown %s's vote against %s, a member after it in the ring (ring %v)", e.Voter, e.Target, g.IDs())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the vote against %s, e's predecessor, was not shown within 10s", near)
	}
}

// quorumAgainst has first and then second vote against id, the first
// stored, the second evicting; between, if set, runs between the two. It
// returns the time from the first vote to the eviction.
func quorumAgainst(t *testing.T, id string, first, second *Member, between func()) time.Duration {
	t.Helper()
	start := time.Now()
	if v := suspect(t, first, id); v != Voted {
		t.Fatalf("the first vote against %s: %s, want voted", id, v)
	}
	if between != nil {
		between()
	}
	if v := suspect(t, second, id); v != Evicted {
		t.Fatalf("the second vote against %s: %s, want evicted", id, v)
	}
	return time.Since(start)
}
