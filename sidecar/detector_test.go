package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/trainer/api"
)

// trace records, in order, what the detector made happen outside itself.
type trace struct {
	mu    sync.Mutex
	lines []string
	added chan string
}

func newTrace() *trace { return &trace{added: make(chan string, 1024)} }

func (t *trace) add(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	t.mu.Lock()
	t.lines = append(t.lines, line)
	t.mu.Unlock()
	t.added <- line
}

func (t *trace) take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.lines
	t.lines = nil
	for len(t.added) > 0 {
		<-t.added
	}
	return out
}

// awaitN waits until n lines were added (counting from the last take).
func (t *trace) awaitN(tb testing.TB, n int) {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-t.added:
		case <-timeout:
			tb.Fatalf("%d lines did not happen within 10s; trace: %q", n, t.take())
		}
	}
}

// await waits for line to be added.
func (t *trace) await(tb testing.TB, line string) {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-t.added:
			if got == line {
				return
			}
		case <-timeout:
			tb.Fatalf("%q did not happen within 10s; trace: %q", line, t.take())
		}
	}
}

// fakeHost is the agent as the detector sees it.
type fakeHost struct{ trace *trace }

func (h fakeHost) publish(e api.Event) { h.trace.add("%s %s", e.Type, e.Member) }
func (h fakeHost) handOver(g *record.Generation) {
	h.trace.add("generation %d", g.Number)
}

// fakeResets records the addresses whose sockets were reset.
type fakeResets struct{ trace *trace }

func (r fakeResets) Reset(_ context.Context, ip net.IP) (int, error) {
	r.trace.add("reset %s", ip)
	return 1, nil
}

// fakeGossip answers checks with a fixed status per member.
type fakeGossip struct {
	trace   *trace
	status  map[string]gossip.Status // what Check finds; absent: Answered
	refused map[string]bool          // what Gone finds
	dead    map[string]bool          // not alive in the gossip view
	clock   *fakeClock               // advanced by each check by the next of took

	mu      sync.Mutex
	took    []time.Duration
	block   chan struct{} // when set, a check returns once it is closed
	watched []string
}

func (g *fakeGossip) Check(_ context.Context, name string) (gossip.Status, error) {
	g.mu.Lock()
	st, ok := g.status[name]
	var took time.Duration
	if len(g.took) > 0 {
		took, g.took = g.took[0], g.took[1:]
	}
	block := g.block
	g.mu.Unlock()
	if !ok {
		st = gossip.Answered
	}
	if g.clock != nil {
		g.clock.advance(took)
	}
	g.trace.add("check %s", name)
	if block != nil {
		<-block
	}
	return st, nil
}

// fakeCheckTimeout is the fake's CheckTimeout.
const fakeCheckTimeout = 100 * time.Millisecond

func (g *fakeGossip) CheckTimeout() time.Duration { return fakeCheckTimeout }

func (g *fakeGossip) Gone(_ context.Context, name string) bool { return g.refused[name] }
func (g *fakeGossip) Alive(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.dead[name]
}

// setDead has the gossip view hold name dead from now on.
func (g *fakeGossip) setDead(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dead[name] = true
}

func (g *fakeGossip) Rejoin(_ context.Context, name string) error {
	g.trace.add("rejoin %s", name)
	return nil
}

func (g *fakeGossip) Watch(names []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.watched = names
}

// fakeVotes answers votes with verdicts in turn (the last one repeats);
// a nil verdict is an etcd error.
type fakeVotes struct {
	trace    *trace
	mu       sync.Mutex
	verdicts []*coordinator.Verdict
	block    chan struct{} // when set, a vote returns once it is closed
}

func (v *fakeVotes) cast(kind, id string) (coordinator.Verdict, error) {
	v.mu.Lock()
	next := v.verdicts[0]
	if len(v.verdicts) > 1 {
		v.verdicts = v.verdicts[1:]
	}
	block := v.block
	v.mu.Unlock()
	v.trace.add("%s %s", kind, id)
	if block != nil {
		<-block
	}
	if next == nil {
		return coordinator.Voted, errors.New("etcdserver: request timed out")
	}
	return *next, nil
}

func (v *fakeVotes) Suspect(_ context.Context, id string) (coordinator.Verdict, error) {
	return v.cast("suspect", id)
}

func (v *fakeVotes) SuspectGone(_ context.Context, id string) (coordinator.Verdict, error) {
	return v.cast("suspect-gone", id)
}

func (v *fakeVotes) SuspectUnreachable(_ context.Context, id string) (coordinator.Verdict, error) {
	return v.cast("suspect-unreachable", id)
}

func (v *fakeVotes) Withdraw(_ context.Context, id string) error {
	v.trace.add("withdraw %s", id)
	return nil
}

func verdicts(vs ...any) []*coordinator.Verdict {
	var out []*coordinator.Verdict
	for _, v := range vs {
		if v, ok := v.(coordinator.Verdict); ok {
			out = append(out, &v)
			continue
		}
		out = append(out, nil)
	}
	return out
}

// fakeRoster has no votes to watch and no registrations.
type fakeRoster struct{}

func (fakeRoster) Members(context.Context) ([]record.MemberInfo, error) { return nil, nil }

func (fakeRoster) WatchVotes(ctx context.Context) <-chan coordinator.VoteEvent {
	out := make(chan coordinator.VoteEvent)
	go func() {
		<-ctx.Done()
		close(out)
	}()
	return out
}

// fakeClock stands still; its timers fire at once.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

// testDetector is a detector for member w0 at 10.0.0.100 with fakes
// around it.
type testDetector struct {
	*detector
	trace   *trace
	gossip  *fakeGossip
	votes   *fakeVotes
	clock   *fakeClock
	metrics *metrics
}

func newTestDetector(t *testing.T) *testDetector {
	t.Helper()
	tr := newTrace()
	td := &testDetector{
		trace:   tr,
		gossip:  &fakeGossip{trace: tr, status: map[string]gossip.Status{}, refused: map[string]bool{}, dead: map[string]bool{}},
		votes:   &fakeVotes{trace: tr, verdicts: verdicts(coordinator.Voted)},
		clock:   &fakeClock{now: time.Unix(1e9, 0)},
		metrics: newMetrics(func() float64 { return 0 }, func() float64 { return 0 }),
	}
	td.detector = newDetector("w0", "10.0.0.100", fakeHost{tr}, td.metrics, td.clock, slog.New(slog.DiscardHandler))
	return td
}

// start starts the detector; it is stopped, its goroutines waited for,
// when stop is called or the test ends.
func (td *testDetector) start(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	td.Start(ctx, detectorDeps{
		Probes: td.gossip, View: td.gossip, Votes: td.votes, Roster: fakeRoster{}, Resets: fakeResets{td.trace},
	})
	stop = sync.OnceFunc(func() {
		cancel()
		td.Wait()
	})
	t.Cleanup(stop)
	return stop
}

// ring is a generation of members w<i> at 10.0.0.<i>.
func ring(number int64, ids []int, left ...string) *record.Generation {
	g := &record.Generation{Number: number, Left: left}
	for _, i := range ids {
		g.Members = append(g.Members, record.RankedMember{ID: fmt.Sprintf("w%d", i), Addr: fmt.Sprintf("10.0.0.%d", i), Slots: 1})
	}
	g.WorldSize = len(g.Members)
	return g
}

func TestDetectorSetGenerationAnnouncesConfirmedDeaths(t *testing.T) {
	tests := []struct {
		name       string
		prev, next *record.Generation
		want       []string
	}{
		{
			name: "a member that left is announced before the handover and its sockets reset after it",
			prev: ring(1, []int{0, 1, 2}), next: ring(2, []int{0, 1}, "w2"),
			want: []string{"member_dead w2", "generation 2", "reset 10.0.0.2"},
		},
		{
			name: "the first generation announces nobody",
			next: ring(1, []int{0, 1}, "w2"),
			want: []string{"generation 1"},
		},
		{
			name: "this member leaving is no death to announce",
			prev: ring(1, []int{0, 1, 2}), next: ring(2, []int{1, 2}, "w0"),
			want: []string{"generation 2"},
		},
		{
			name: "a member that left without having been in the previous generation is not announced",
			prev: ring(1, []int{0, 1}), next: ring(2, []int{0, 1}, "w5"),
			want: []string{"generation 2"},
		},
		{
			name: "a dead member on this member's own address is announced but its sockets are kept",
			prev: ring(1, []int{0, 1, 100}), next: ring(2, []int{0, 1}, "w100"),
			want: []string{"member_dead w100", "generation 2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := newTestDetector(t)
			stop := td.start(t)
			ctx := context.Background()
			if tt.prev != nil {
				td.SetGeneration(ctx, tt.prev)
			}
			td.trace.take()
			td.SetGeneration(ctx, tt.next)
			stop() // the sweep's checks, if any, are done
			var got []string
			for _, l := range td.trace.take() {
				if !strings.HasPrefix(l, "check ") && !strings.HasPrefix(l, "suspect") {
					got = append(got, l)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("what the new generation made happen (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetectorSweepsAfterADeathOnlyNextToTheDead(t *testing.T) {
	tests := []struct {
		name       string
		prev, next *record.Generation
		want       []string
	}{
		{
			name: "a member whose successor died checks its successors in the new ring",
			prev: ring(1, []int{0, 1, 2, 3, 4, 5}), next: ring(2, []int{0, 2, 3, 4, 5}, "w1"),
			want: []string{"w2", "w3", "w4"},
		},
		{
			name: "a member three before the dead one checks its successors too",
			prev: ring(1, []int{0, 1, 2, 3, 4, 5}), next: ring(2, []int{0, 1, 2, 4, 5}, "w3"),
			want: []string{"w1", "w2", "w4"},
		},
		{
			// Every member sweeping set off three checks of every member at
			// once; on a busy machine they timed out against live members.
			name: "a member far from the dead one checks nobody",
			prev: ring(1, []int{0, 1, 2, 3, 4, 5, 6, 7}), next: ring(2, []int{0, 1, 2, 3, 5, 6, 7}, "w4"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := newTestDetector(t)
			stop := td.start(t)
			ctx := context.Background()
			td.SetGeneration(ctx, tt.prev)
			td.SetGeneration(ctx, tt.next)
			stop()
			if checked := td.checked(); !slices.Equal(checked, tt.want) {
				t.Errorf("checked %v after a death, want %v", checked, tt.want)
			}
		})
	}
}

// The member whose vote evicted a peer checks the peers on either side of
// it at once, itself excepted: they may have been cut off with it.
func TestDetectorSweepsTheDeadMembersNeighboursOnItsOwnEviction(t *testing.T) {
	td := newTestDetector(t)
	stop := td.start(t)
	td.SetGeneration(context.Background(), ring(1, []int{0, 1, 2, 3, 4, 5, 6, 7}))
	td.trace.take()
	td.announceDead("w6")
	stop()
	if checked, want := td.checked(), []string{"w1", "w3", "w4", "w5", "w7"}; !slices.Equal(checked, want) {
		t.Errorf("checked %v after evicting w6, want %v (the three after w6 and the three before, less this member, w0)", checked, want)
	}
}

// awaitChecksDone waits until no check is running: a check in flight
// holds back another of the same member, whatever asks for it.
func (td *testDetector) awaitChecksDone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		td.mu.Lock()
		n := len(td.checking)
		td.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d checks still running after 10s", n)
		}
		time.Sleep(time.Millisecond) // the check's goroutine is ending
	}
}

// checked returns, sorted, the members the trace shows checked, and
// empties the trace.
func (td *testDetector) checked() []string {
	var ids []string
	for _, l := range td.trace.take() {
		if id, ok := strings.CutPrefix(l, "check "); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestDetectorVotesOnlyOnAChecksTimelySilence(t *testing.T) {
	late := stallFactor*fakeCheckTimeout + time.Millisecond
	tests := []struct {
		name string
		took []time.Duration
		want []string
	}{
		{"a silence on time votes", []time.Duration{fakeCheckTimeout}, []string{"check w1", "suspect w1"}},
		{
			// A check that came back late was timed by this sidecar's own
			// stall: the peer may have answered unheard.
			name: "a late silence is checked again, and the check on time votes",
			took: []time.Duration{late, fakeCheckTimeout},
			want: []string{"check w1", "check w1", "suspect w1"},
		},
		{
			name: "a stall through every check casts no vote",
			took: slices.Repeat([]time.Duration{late}, maxStalledChecks),
			want: slices.Repeat([]string{"check w1"}, maxStalledChecks),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := newTestDetector(t)
			td.gossip.clock, td.gossip.took = td.clock, tt.took
			td.gossip.status["w1"] = gossip.Silent
			stop := td.start(t)
			td.MemberSuspect("w1", nil)
			td.trace.awaitN(t, len(tt.want))
			stop()
			if got := td.trace.take(); !slices.Equal(got, tt.want) {
				t.Errorf("a failed probe made %q happen, want %q", got, tt.want)
			}
		})
	}
}

func TestDetectorLeavesMembersOutsideItsGenerationAlone(t *testing.T) {
	td := newTestDetector(t)
	td.gossip.status["w2"] = gossip.Gone
	stop := td.start(t)
	td.SetGeneration(context.Background(), ring(2, []int{0, 1}, "w2"))
	td.trace.take()
	// Right after an eviction every survivor hears gossip's own verdict on
	// the evicted member: none of them is to check or vote again.
	td.MemberDead("w2", nil)
	td.MemberSuspect("w2", nil)
	td.MemberClosed("w2")
	stop()
	if got := td.trace.take(); len(got) != 0 {
		t.Errorf("hints about a member outside the generation made %q happen", got)
	}
}

func TestDetectorWatchesRingPredecessors(t *testing.T) {
	tests := []struct {
		name string
		g    *record.Generation
		want []string
	}{
		{"the first member watches the last two", ring(1, []int{0, 1, 2, 3, 4}), []string{"w4", "w3"}},
		{"a member in the middle watches the two before it", ring(1, []int{3, 2, 0, 1}), []string{"w2", "w3"}},
		{"in a ring of two each watches the other", ring(1, []int{1, 0}), []string{"w1"}},
		{"alone, it watches nobody", ring(1, []int{0}), nil},
		{"a member outside the ring watches nobody", ring(1, []int{1, 2, 3}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := newTestDetector(t)
			td.start(t)
			td.SetGeneration(context.Background(), tt.g)
			td.gossip.mu.Lock()
			defer td.gossip.mu.Unlock()
			if !slices.Equal(td.gossip.watched, tt.want) {
				t.Errorf("watches %v, want %v", td.gossip.watched, tt.want)
			}
		})
	}
}

func TestDetectorCheckActsOnWhatThePeerAnswers(t *testing.T) {
	tests := []struct {
		name   string
		status gossip.Status
		dead   bool
		want   []string
	}{
		{"a peer whose port refuses is voted against as gone", gossip.Gone, false, []string{"check w1", "suspect-gone w1"}},
		{"a silent peer is voted against", gossip.Silent, false, []string{"check w1", "suspect w1"}},
		{"a peer whose node does not answer is voted against as unreachable", gossip.Unreachable, false, []string{"check w1", "suspect-unreachable w1"}},
		{"a peer that answers while gossip holds it dead is rejoined", gossip.Answered, true, []string{"check w1", "rejoin w1"}},
		{"a peer that answers is left alone", gossip.Answered, false, []string{"check w1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := newTestDetector(t)
			td.gossip.status["w1"] = tt.status
			td.gossip.dead["w1"] = tt.dead
			stop := td.start(t)
			td.MemberDead("w1", nil)
			td.trace.await(t, tt.want[len(tt.want)-1])
			stop()
			if got := td.trace.take(); !slices.Equal(got, tt.want) {
				t.Errorf("a check made %q happen, want %q", got, tt.want)
			}
		})
	}
}

func TestDetectorCheckIsThrottledPerMember(t *testing.T) {
	td := newTestDetector(t)
	stop := td.start(t)
	td.MemberClosed("w1")
	td.trace.await(t, "check w1")
	td.MemberClosed("w1") // within checkEvery: dropped
	td.MemberClosed("w2")
	td.trace.await(t, "check w2")
	td.clock.advance(checkEvery)
	td.MemberClosed("w1")
	td.trace.await(t, "check w1")
	stop()
	if got := len(td.trace.take()); got != 3 {
		t.Errorf("%d checks, want 3: one per member per %v", got, checkEvery)
	}
}

func TestDetectorRunsOneCheckAtATimePerMember(t *testing.T) {
	td := newTestDetector(t)
	td.gossip.block = make(chan struct{})
	stop := td.start(t)
	td.MemberClosed("w1")
	td.trace.await(t, "check w1")
	td.trace.take()
	// The check outlasts checkEvery, as checks do under load: a second
	// one would pile up on it.
	td.clock.advance(checkEvery)
	td.MemberClosed("w1")
	td.MemberSuspect("w1", nil)
	close(td.gossip.block)
	stop()
	if got := td.trace.take(); len(got) != 0 {
		t.Errorf("hints during a running check made %q happen, want nothing", got)
	}
}

// A sidecar that finds many peers unresponsive at once is more likely the
// one in trouble: beyond maxChecks running checks, and maxVotes votes being
// cast, it sheds the hints, and its load on its peers and on etcd stays
// bounded whatever it believes.
func TestDetectorBoundsItsChecksAndVotesInFlight(t *testing.T) {
	for _, tc := range []struct {
		what  string
		limit int
		block func(*testDetector) chan struct{} // holds every check, or vote, until closed
		hint  func(td *testDetector, name string)
	}{
		{"check", maxChecks,
			func(td *testDetector) chan struct{} { td.gossip.block = make(chan struct{}); return td.gossip.block },
			func(td *testDetector, name string) { td.MemberSuspect(name, nil) }},
		{"vote", maxVotes,
			func(td *testDetector) chan struct{} { td.votes.block = make(chan struct{}); return td.votes.block },
			func(td *testDetector, name string) { td.suspect(name, "a test") }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			td := newTestDetector(t)
			block := tc.block(td)
			stop := td.start(t)
			for i := 1; i <= tc.limit+2; i++ {
				tc.hint(td, fmt.Sprintf("w%d", i))
			}
			td.trace.awaitN(t, tc.limit)
			td.trace.take()
			if got := testutil.ToFloat64(td.metrics.shed.WithLabelValues(tc.what)); got != 2 {
				t.Errorf("%v %ss shed, want the 2 beyond the %d in flight", got, tc.what, tc.limit)
			}
			close(block)
			stop()
			if got := td.trace.take(); len(got) != 0 {
				t.Errorf("the shed %ss made %q happen later", tc.what, got)
			}
		})
	}
}

func TestDetectorIgnoresHintsBeforeStartAndAboutItself(t *testing.T) {
	td := newTestDetector(t)
	// Not started: a hint that reached its (unset) collaborators would panic.
	td.MemberSuspect("w1", nil)
	td.MemberDead("w1", nil)
	td.ReportFailure(api.FailureReport{Peer: "w1"})
	stop := td.start(t)
	td.MemberSuspect("w0", nil)
	td.MemberDead("w0", nil)
	stop()
	if got := td.trace.take(); len(got) != 0 {
		t.Errorf("hints before start or about this member made %q happen", got)
	}
}

func TestDetectorVoteRetriesWhileEtcdFails(t *testing.T) {
	tests := []struct {
		name       string
		verdicts   []*coordinator.Verdict
		status     gossip.Status // of the check between tries
		want       []string
		wantErrors float64
	}{
		{
			name:     "a vote that fails is cast again once the suspect still does not answer",
			verdicts: verdicts(nil, nil, coordinator.Voted), status: gossip.Silent,
			want:       []string{"suspect w1", "check w1", "suspect w1", "check w1", "suspect w1"},
			wantErrors: 2,
		},
		{
			name:     "a vote that fails is dropped when the suspect answers meanwhile",
			verdicts: verdicts(nil), status: gossip.Answered,
			want:       []string{"suspect w1", "check w1"},
			wantErrors: 1,
		},
		{
			name:     "a vote that fails is cast as unreachable once the suspect's node does not answer",
			verdicts: verdicts(nil, coordinator.Voted), status: gossip.Unreachable,
			want:       []string{"suspect w1", "check w1", "suspect-unreachable w1"},
			wantErrors: 1,
		},
		{
			name:     "a vote that fails is cast as gone once the suspect's port refuses",
			verdicts: verdicts(nil, coordinator.Voted), status: gossip.Gone,
			want:       []string{"suspect w1", "check w1", "suspect-gone w1"},
			wantErrors: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := newTestDetector(t)
			td.votes.verdicts = tt.verdicts
			td.gossip.status["w1"] = tt.status
			stop := td.start(t)
			td.suspect("w1", "test")
			// The last line may also be the first ("suspect w1"): wait
			// for them all.
			td.trace.awaitN(t, len(tt.want))
			stop()
			if got := td.trace.take(); !slices.Equal(got, tt.want) {
				t.Errorf("the vote made %q happen, want %q", got, tt.want)
			}
			if got := testutil.ToFloat64(td.metrics.etcdErrors.WithLabelValues("suspect")); got != tt.wantErrors {
				t.Errorf("%v etcd errors counted, want %v", got, tt.wantErrors)
			}
		})
	}
}

// etcdJob is a job on an embedded etcd with members w0 and w1 joined and
// w2 registered by hand, on a lease nobody refutes for: a frozen member.
func etcdJob(t *testing.T) (*clientv3.Client, *coordinator.Job, []*coordinator.Member) {
	t.Helper()
	client := etcdtest.Client(t, etcdtest.Start(t))
	cfg := coordinator.DefaultConfig("default", "detector")
	cfg.Logger = slog.New(slog.DiscardHandler)
	job, err := coordinator.NewJob(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(job.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var members []*coordinator.Member
	for i := range 2 {
		m, err := job.Join(ctx, record.MemberInfo{ID: fmt.Sprintf("w%d", i), Addr: fmt.Sprintf("10.0.0.%d", i), Slots: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		members = append(members, m)
	}
	lease, err := client.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(record.MemberInfo{ID: "w2", Addr: "10.0.0.2", Slots: 1, State: record.StateActive})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, cfg.Prefix()+record.MembersDir+"w2", string(b), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	// The job follows the votes against the members before its own in its
	// ring: w2 must be in it, as it is in the detectors' generation.
	for g := range job.Watch(ctx) {
		if _, in := g.Member("w2"); in {
			return client, job, members
		}
	}
	t.Fatal("no generation with w2 within 10s")
	return nil, nil, nil
}

// etcdDetector is a detector for member m whose votes go to etcd; checks
// of w2 find st.
func etcdDetector(t *testing.T, job *coordinator.Job, m *coordinator.Member, st gossip.Status) *testDetector {
	t.Helper()
	td := newTestDetector(t)
	td.detector.self = m.ID()
	td.gossip.status["w2"] = st
	td.gossip.refused["w2"] = st == gossip.Gone
	ctx, cancel := context.WithCancel(context.Background())
	td.Start(ctx, detectorDeps{
		Probes: td.gossip, View: td.gossip, Votes: m, Roster: job, Resets: fakeResets{td.trace},
	})
	t.Cleanup(func() {
		cancel()
		td.Wait()
	})
	td.SetGeneration(ctx, ring(1, []int{0, 1, 2}))
	td.trace.take()
	return td
}

// awaitKey waits until key, which is or was written, exists (want) or no
// longer does: it replays the key's history from the first revision.
func awaitKey(t *testing.T, client *clientv3.Client, key string, want bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for wr := range client.Watch(ctx, key, clientv3.WithRev(1)) {
		if n := len(wr.Events); n > 0 && (wr.Events[n-1].Type == clientv3.EventTypePut) == want {
			return
		}
	}
	t.Fatalf("%s: not in the wanted state (exists: %v) within 10s", key, want)
}

func TestDetectorVotesInEtcd(t *testing.T) {
	prefix := record.Prefix("default", "detector")
	t.Run("another member's vote sets off this checker's check, whose vote evicts, announces the death and resets its sockets", func(t *testing.T) {
		client, job, members := etcdJob(t)
		d1 := etcdDetector(t, job, members[1], gossip.Gone)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if v, err := members[0].Suspect(ctx, "w2"); err != nil || v != coordinator.Voted {
			t.Fatalf("w0's vote against w2: %v, %v; want voted", v, err)
		}
		d1.trace.await(t, "member_dead w2")
		awaitKey(t, client, prefix+record.MembersDir+"w2", false)
		want := []string{"check w2", "reset 10.0.0.2", "member_dead w2"}
		if got := d1.trace.take(); !slices.Equal(got[:min(len(got), len(want))], want) {
			t.Errorf("w0's vote made %q happen, want %q first", got, want)
		}
		if got := testutil.ToFloat64(d1.metrics.votes.WithLabelValues("evicted")); got != 1 {
			t.Errorf("%v evicting votes counted, want 1", got)
		}
		// The detector whose vote confirmed the death does not announce it
		// again with the generation that follows.
		d1.SetGeneration(ctx, ring(2, []int{0, 1}, "w2"))
		if got := d1.trace.take(); slices.Contains(got, "member_dead w2") || !slices.Contains(got, "generation 2") {
			t.Errorf("the generation without w2 made %q happen, want its handover and no second death", got)
		}
	})
	t.Run("a vote is withdrawn from etcd when the suspect answers again", func(t *testing.T) {
		client, job, members := etcdJob(t)
		d0 := etcdDetector(t, job, members[0], gossip.Silent)
		key := prefix + record.VoteKey("w2", "w0")
		d0.MemberSuspect("w2", nil)
		awaitKey(t, client, key, true)
		d0.MemberAnswered("w2")
		awaitKey(t, client, key, false)
	})
}

// A trainer that stalls has its member check its ring neighbours, on both
// sides: a silent one holds the collective. A check of a moment ago (a
// gossip hint's) does not hold them back.
func TestDetectorChecksTheNeighboursWhenTheTrainerStalls(t *testing.T) {
	td := newTestDetector(t)
	stop := td.start(t)
	td.SetGeneration(context.Background(), ring(1, []int{0, 1, 2, 3, 4, 5, 6, 7}))
	td.check("w1", "gossip probe failed")
	td.trace.awaitN(t, 1)
	td.awaitChecksDone(t)
	td.trace.take()
	td.trainerStalled(300 * time.Millisecond)
	stop()
	if checked, want := td.checked(), []string{"w1", "w2", "w3", "w5", "w6", "w7"}; !slices.Equal(checked, want) {
		t.Errorf("checked %v after the trainer stalled, want %v (three after w0 and three before)", checked, want)
	}
}

func TestAStallIsTwoP90StepsAtLeastTheFloor(t *testing.T) {
	steps := func(n int, s float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		times []float64
		want  time.Duration // 0: no pace yet
	}{
		{"no step yet", nil, 0},
		{"before the pace is known: at least the early floor", steps(stallMinSteps-1, 0.2), earlyStallFloor},
		{"before the pace is known: twice the slowest step", append(steps(1, 3), steps(2, 0.1)...), 6 * time.Second},
		{"steady 200 ms steps", steps(stallMinSteps, 0.2), 400 * time.Millisecond},
		{"the p90, not the median", append(steps(8, 0.1), steps(2, 0.5)...), time.Second},
		{"fast steps: the floor", steps(20, 0.01), stallFloor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := stallLimit(tc.times)
			if ok != (tc.want > 0) || (ok && (got < tc.want-time.Millisecond || got > tc.want+time.Millisecond)) {
				t.Errorf("stallLimit = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

// A trainer that made no step for its stall limit is held up until its next
// step, and the member's votes say so (coordinator.Config.Waiting): a silent
// peer then costs its eviction the refute window, not the idle one.
func TestAStalledTrainerIsHeldUpUntilItStepsAgain(t *testing.T) {
	a := &Agent{stepped: make(chan time.Duration, 1), detect: newDetector("w0", "127.0.0.1", nil, nil, realClock{}, slog.Default())}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.watchStalls(ctx) }()
	defer func() { cancel(); <-done }()
	awaitHeld := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); a.held.Load() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("held %v, want %v within 10s", !want, want)
			}
			time.Sleep(time.Millisecond) // polling an atomic the watch sets
		}
	}
	if a.held.Load() {
		t.Fatal("held before any step")
	}
	a.stepped <- 20 * time.Millisecond // a step, and a stall limit of 20 ms
	awaitHeld(true)
	a.stepped <- time.Hour // the next step
	awaitHeld(false)
}

// Gossip's verdict reaches every member at once: only the member's
// checkers (the coordinator.Checkers after it in the ring) look, whether
// gossip declared it dead or forgot it. At 128 members, 119 of the 127
// votes against a live member after a machine-wide stall came from it.
func TestAGossipVerdictIsCheckedOnlyByTheMembersCheckers(t *testing.T) {
	for _, tc := range []struct {
		name string
		tell func(td *testDetector, name string)
	}{
		{"declared dead", func(td *testDetector, name string) { td.MemberDead(name, nil) }},
		{"forgotten", func(td *testDetector, name string) { td.gossip.setDead(name); td.reconcile() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := newTestDetector(t)
			td.gossip.status["w3"], td.gossip.status["w5"] = gossip.Silent, gossip.Silent
			stop := td.start(t)
			td.SetGeneration(context.Background(), ring(1, []int{1, 2, 3, 4, 0, 5, 6, 7}))
			td.awaitChecksDone(t)
			td.trace.take()
			tc.tell(td, "w3") // w0 is its third checker: w4, w0 and w5 follow it
			td.trace.await(t, "suspect w3")
			tc.tell(td, "w5") // w6, w7 and w1 follow it
			tc.tell(td, "w6") // w7, w1 and w2 follow it
			stop()
			if got, want := td.trace.take(), []string{"check w3", "suspect w3"}; !slices.Equal(got, want) {
				t.Errorf("gossip's word on w3, w5 and w6 made %q happen, want %q", got, want)
			}
		})
	}
}
