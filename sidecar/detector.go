package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/sidecar/sockreset"
	"github.com/ringside/ringside/trainer/api"
)

// How a death becomes a new generation. No sidecar acts on its own
// observation: each one that finds a peer unresponsive (its own gossip
// probe failed, a check failed, or the trainer's connection to the peer
// broke and the peer's gossip port does not answer) votes against the
// peer's registration in etcd (coordinator.Member.Suspect). coordinator.Checkers
// other members check the peer at once when a vote appears, so a second,
// independent observation follows the first within a probe timeout; two
// votes evict, and the leader commits the generation without the peer. A
// live peer deletes votes against it, so one confused observer, or a
// gossip-only partition, evicts nobody. Sockets are reset and the trainer
// is told only of deaths that are confirmed: the member is in the new
// generation's Left, or this sidecar's own vote evicted it.

// checkEvery bounds how often one member is checked: during a gossip
// partition every vote would otherwise set off checks that vote again.
const checkEvery = 500 * time.Millisecond

// A check answered Silent later than stallFactor times its timeout was
// timed by this sidecar, not by the peer: its own process did not run
// meanwhile (two busy cores and a generation that woke every sidecar at
// once; a throttled container, a VM pause), and the peers it checked were
// as likely starved as dead. Such a silence is no evidence: the check is
// repeated, at most maxStalledChecks times in all, and only a check that
// timed out on time votes. A sidecar that stalls through all of them
// casts no vote: members that keep time, gossip's next verdict or the
// next reconcile check the peer again (a process that exited is found
// regardless: its port refuses at once).
const (
	stallFactor      = 2
	maxStalledChecks = 3
)

// A sidecar that finds many peers unresponsive at once is more likely the
// one in trouble (starved of CPU, cut off) than they are all dead, and a
// hundred sidecars each checking and voting against a hundred peers
// after a stall they all shared overloaded etcd for good: every vote timed
// out, was retried, and held up the next (bench detect at 128 members, a
// 2-3 s stall of the whole machine). So each sidecar runs at most
// maxChecks checks and casts at most maxVotes votes at a time; a hint
// beyond them is shed (ringside_detector_shed_total). Nothing is lost for
// good: reconcile checks every member gossip lost, every reconcileEvery,
// and the other members of the ring check and vote too.
const (
	maxChecks = 8 // a stalled trainer has its six neighbours checked at once
	maxVotes  = 4
)

// reconcileEvery is how often the members of the generation are compared
// with the gossip view.
const reconcileEvery = 2 * time.Second

// host is what the detector needs of the agent: a way to tell the trainer.
type host interface {
	// publish tells the trainer, on every event stream, of e.
	publish(e api.Event)
	// handOver gives the trainer generation g; the trainer leaves its
	// old group on it.
	handOver(g *record.Generation)
}

var _ host = (*Agent)(nil)

// prober asks a peer whether it lives.
type prober interface {
	Check(ctx context.Context, name string) (gossip.Status, error)
	// CheckTimeout is how long a Check now waits for an answer.
	CheckTimeout() time.Duration
	Gone(ctx context.Context, name string) bool
}

// gossipView is gossip's picture of the job.
type gossipView interface {
	Alive(name string) bool
	Rejoin(ctx context.Context, name string) error
	Watch(names []string)
}

// voteStore keeps this member's votes in etcd.
type voteStore interface {
	Suspect(ctx context.Context, id string) (coordinator.Verdict, error)
	SuspectGone(ctx context.Context, id string) (coordinator.Verdict, error)
	SuspectUnreachable(ctx context.Context, id string) (coordinator.Verdict, error)
	Withdraw(ctx context.Context, id string) error
}

// roster is the job's registrations and the votes cast against them.
type roster interface {
	Members(ctx context.Context) ([]record.MemberInfo, error)
	WatchVotes(ctx context.Context) <-chan coordinator.VoteEvent
}

// socketResetter destroys the pod's TCP connections to a peer.
type socketResetter interface {
	Reset(ctx context.Context, peer net.IP) (int, error)
}

// clock is the time the detector throttles checks and paces retries by.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

var (
	_ prober         = (*gossip.Gossip)(nil)
	_ gossipView     = (*gossip.Gossip)(nil)
	_ voteStore      = (*coordinator.Member)(nil)
	_ roster         = (*coordinator.Job)(nil)
	_ socketResetter = (*sockreset.Resetter)(nil)
)

// detectorDeps are the detector's collaborators; they exist only once the
// member has joined, after gossip, which reports to the detector, started.
type detectorDeps struct {
	Probes prober
	View   gossipView
	Votes  voteStore
	Roster roster
	Resets socketResetter
}

// detector finds dead peers and acts on confirmed deaths: it turns gossip's
// and the trainer's hints into checks and votes, withdraws votes against
// peers that answer again, watches this member's ring predecessors, and
// resets the trainer's sockets to the dead.
type detector struct {
	self      string
	advertise net.IP // a peer on it shares our sockets: never reset
	log       *slog.Logger
	metrics   *metrics
	host      host
	clock     clock

	// Set by Start before started: gossip events may arrive before the
	// member has joined, and are ignored until then.
	detectorDeps
	ctx     context.Context
	started atomic.Bool

	mu         sync.Mutex
	gen        *record.Generation
	stopped    bool                  // no more goroutines: Wait is waiting for them
	suspicions map[string]*suspicion // our standing votes, by suspect
	checkedAt  map[string]time.Time  // when each member was last checked
	checking   map[string]bool       // members a check is running on
	announced  map[string]bool       // deaths announced ahead of their generation
	deadAt     map[string]time.Time  // when members of gen were confirmed dead

	wg sync.WaitGroup
}

var (
	_ gossip.Events        = (*detector)(nil)
	_ gossip.SuspectEvents = (*detector)(nil)
	_ gossip.JoinEvents    = (*detector)(nil)
	_ gossip.CloseEvents   = (*detector)(nil)
)

// suspicion is this sidecar's vote against one peer.
type suspicion struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// newDetector prepares a detector for member self; it ignores every hint
// until Start.
func newDetector(self, advertise string, h host, m *metrics, c clock, logger *slog.Logger) *detector {
	return &detector{
		self:       self,
		advertise:  net.ParseIP(advertise),
		log:        logger,
		metrics:    m,
		host:       h,
		clock:      c,
		suspicions: make(map[string]*suspicion),
		checkedAt:  make(map[string]time.Time),
		checking:   make(map[string]bool),
		announced:  make(map[string]bool),
		deadAt:     make(map[string]time.Time),
	}
}

// Start runs the detector until ctx ends: it checks the suspects other
// members vote against and compares the generation with gossip's view.
// Call it once, after the member joined; then call Wait.
func (d *detector) Start(ctx context.Context, deps detectorDeps) {
	d.detectorDeps, d.ctx = deps, ctx
	d.started.Store(true)
	d.goOwned(func() { d.checkVotes(ctx) })
	d.goOwned(func() { d.reconcileGossip(ctx) })
}

// Wait blocks until the context given to Start ends and every goroutine
// of the detector has returned.
func (d *detector) Wait() {
	<-d.ctx.Done()
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.wg.Wait()
}

// goOwned runs f on a goroutine Wait waits for, unless Wait has begun: a
// hint that arrives during shutdown is dropped.
func (d *detector) goOwned(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.stopped {
		d.wg.Go(f)
	}
}

// SetGeneration acts on a newly committed generation g: it announces the
// deaths g confirms, watches this member's new predecessors, hands g to
// the trainer, and only then resets the sockets to the dead (the trainer
// leaves the old group on g; a socket reset is a dump of every TCP socket
// of the host) and checks the dead members' neighbours.
func (d *detector) SetGeneration(ctx context.Context, g *record.Generation) {
	now := d.clock.Now()
	d.mu.Lock()
	prev := d.gen
	d.gen = g
	for id, at := range d.deadAt {
		if _, in := g.Member(id); !in {
			d.metrics.failureToCommit.Observe(now.Sub(at).Seconds())
			delete(d.deadAt, id)
		}
	}
	d.mu.Unlock()

	dead := d.announceLeft(prev, g)
	d.watchNeighbours(g)
	d.host.handOver(g)
	for _, m := range dead {
		d.resetSockets(ctx, m.ID, net.ParseIP(m.Addr))
	}
	if len(g.Left) > 0 {
		d.sweep(prev, g, g.Left)
	}
}

// generation returns the newest generation SetGeneration was given.
func (d *detector) generation() *record.Generation {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gen
}

// MemberDead: gossip's verdict came from some member's suspicion timeout;
// it is a reason to look, not a confirmation, and only name's checkers
// look (see checkRumour).
func (d *detector) MemberDead(name string, _ net.IP) { d.checkRumour(name, "gossip declared it dead") }

// checkRumour checks name on word that reached every member at once
// (gossip's verdict, gossip forgetting it) only if this member is one of
// name's coordinator.Checkers, the members after it in the ring; without
// a generation yet, every member checks. When the whole machine stalled
// for a second or two, gossip declared a few live members dead
// everywhere at once, and every member checked each of them, still short
// of CPU, and voted against it: 119 of the 127 votes against one live
// member of 128 came from gossip's verdict, and each was a write to etcd
// and a watch event for its checkers. Three checks are enough where two
// votes evict.
func (d *detector) checkRumour(name, why string) {
	if g := d.generation(); g != nil && !slices.Contains(checked(g, d.self), name) {
		return
	}
	d.check(name, why)
}

// checked returns the members self is a checker of: the
// coordinator.Checkers before it in g's ring.
func checked(g *record.Generation, self string) []string {
	return g.Predecessors(self, coordinator.Checkers)
}

// MemberSuspect: our own probe found name unresponsive. One failed probe
// is checked before it becomes a vote: under load a probe fails for want
// of CPU on either side, and a vote costs every member a watch event and
// the suspect's checkers a check each.
func (d *detector) MemberSuspect(name string, _ net.IP) { d.check(name, "gossip probe failed") }

// MemberAnswered: name answers again; our vote, if any, goes.
func (d *detector) MemberAnswered(name string) { d.withdraw(name) }

// MemberClosed: name's watch connection closed; its process may have
// exited.
func (d *detector) MemberClosed(name string) { d.check(name, "its watch connection closed") }

// MemberJoined: name is back in gossip (it refuted being declared dead, or
// rejoined); our vote, if any, goes.
func (d *detector) MemberJoined(name string, _ net.IP) { d.withdraw(name) }

// suspect starts this sidecar's vote against name unless one stands. The
// vote is retried while etcd fails, so a death during an etcd outage is
// acted on when etcd returns.
func (d *detector) suspect(name, why string) { d.startVote(name, why, gossip.Silent) }

// suspectGone votes against name, whose process is gone for certain.
func (d *detector) suspectGone(name, why string) { d.startVote(name, why, gossip.Gone) }

// startVote votes against name with the evidence a check found (Silent,
// Unreachable or Gone).
func (d *detector) startVote(name, why string, found gossip.Status) {
	if name == d.self || !d.started.Load() {
		return
	}
	d.mu.Lock()
	if d.casting(name) || d.stopped {
		d.mu.Unlock()
		return
	}
	if d.votesCasting() >= maxVotes {
		d.mu.Unlock()
		d.metrics.shed.WithLabelValues("vote").Inc()
		d.log.Debug("not voting: as many votes are being cast already", "suspect", name, "why", why, "votes", maxVotes)
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	s := &suspicion{cancel: cancel, done: make(chan struct{})}
	d.suspicions[name] = s
	d.log.Info("voting against an unresponsive member", "suspect", name, "why", why)
	// Under d.mu with the stored suspicion: a withdraw that finds it must
	// find it cast or being cast, never wait for a goroutine not started.
	d.wg.Go(func() {
		defer close(s.done)
		verdict := d.vote(ctx, name, found)
		if verdict == coordinator.Evicted {
			d.announceDead(name)
		}
		if verdict != coordinator.Voted {
			d.mu.Lock()
			if d.suspicions[name] == s {
				delete(d.suspicions, name)
			}
			d.mu.Unlock()
		}
	})
	d.mu.Unlock()
}

// votesCasting counts our votes being cast. d.mu is held.
func (d *detector) votesCasting() int {
	n := 0
	for name := range d.suspicions {
		if d.casting(name) {
			n++
		}
	}
	return n
}

// casting reports whether our vote against name is being cast. One that
// was stored does not count: it may have been refuted since (or swept
// away with an eviction), so a new failure votes again. d.mu is held.
func (d *detector) casting(name string) bool {
	s, ok := d.suspicions[name]
	if !ok {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// vote casts the vote, retrying with backoff until it is stored or ctx
// ends. A suspect whose gossip port refuses a connection is gone for
// certain, and so voted against as such: its eviction need not wait out
// the refute window. One whose node did not complete a handshake is
// voted against as unreachable: its eviction need not wait out the
// correlated window.
func (d *detector) vote(ctx context.Context, name string, found gossip.Status) coordinator.Verdict {
	if found != gossip.Gone && d.Probes.Gone(ctx, name) {
		found = gossip.Gone
	}
	bo := newRetryBackoff()
	for {
		cast := d.Votes.Suspect
		switch found {
		case gossip.Gone:
			cast = d.Votes.SuspectGone
		case gossip.Unreachable:
			cast = d.Votes.SuspectUnreachable
		}
		v, err := cast(ctx, name) // each etcd call is bounded; the refute window is not
		if err == nil {
			d.metrics.votes.WithLabelValues(v.String()).Inc()
			return v
		}
		if ctx.Err() != nil {
			return coordinator.Gone
		}
		d.metrics.etcdErrors.WithLabelValues("suspect").Inc()
		d.log.Warn("could not vote against a suspect; retrying", "suspect", name, "err", err)
		select {
		case <-ctx.Done():
			return coordinator.Gone
		case <-d.clock.After(bo.NextBackOff()):
		}
		// The vote must be news when it lands: one that waited out an etcd
		// outage may be about a partition that healed meanwhile.
		st, err := d.Probes.Check(ctx, name)
		if err == nil && st == gossip.Answered {
			d.log.Info("suspect answers again; vote dropped before it was stored", "suspect", name)
			return coordinator.Gone
		}
		if err == nil && found != gossip.Gone {
			found = st // Silent, Unreachable or Gone: the newest evidence
		}
	}
}

// withdraw deletes this sidecar's vote against name, which answers again.
func (d *detector) withdraw(name string) {
	d.mu.Lock()
	s, ok := d.suspicions[name]
	delete(d.suspicions, name)
	d.mu.Unlock()
	if !ok {
		return
	}
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(d.ctx, 2*time.Second)
	defer cancel()
	if err := d.Votes.Withdraw(ctx, name); err != nil {
		d.metrics.etcdErrors.WithLabelValues("withdraw").Inc()
		d.log.Warn("could not withdraw a vote; it goes with this member's lease", "suspect", name, "err", err)
		return
	}
	d.log.Info("suspect answers again; vote withdrawn", "suspect", name)
}

// check pings name once and votes against it if it does not answer, as
// against a process gone for certain if its port refuses a connection.
func (d *detector) check(name, why string) { d.checkMaybeAgain(name, why, false) }

// checkMaybeAgain is check; again skips its throttle (checkEvery), for a
// hint that comes at most once per cause (a stall of the trainer).
func (d *detector) checkMaybeAgain(name, why string, again bool) {
	if name == d.self || !d.started.Load() {
		return
	}
	d.mu.Lock()
	now := d.clock.Now()
	// A check lasts one probe timeout, well under checkEvery: one started
	// since then is still running or has just voted.
	// One check at a time per member: under load a check lasts longer
	// than checkEvery, and checks piling up on each other starved the
	// sidecar further.
	skip := d.casting(name) || d.announced[name] || d.checking[name] || (!again && now.Sub(d.checkedAt[name]) < checkEvery) || d.outside(name)
	shed := !skip && len(d.checking) >= maxChecks
	if !skip && !shed {
		d.checkedAt[name], d.checking[name] = now, true
	}
	d.mu.Unlock()
	if shed {
		d.metrics.shed.WithLabelValues("check").Inc()
		d.log.Debug("not checking: as many checks are running already", "suspect", name, "why", why, "checks", maxChecks)
	}
	if skip || shed {
		return
	}
	d.goOwned(func() {
		defer func() {
			d.mu.Lock()
			delete(d.checking, name)
			d.mu.Unlock()
		}()
		st, err := d.checkOnTime(name)
		switch {
		case err != nil:
			d.log.Debug("could not check a suspect", "suspect", name, "err", err)
		case st == gossip.Gone:
			d.suspectGone(name, why+"; its port refused a connection")
		case st == gossip.Silent:
			d.suspect(name, why+"; it did not answer a check either")
		case st == gossip.Unreachable:
			d.startVote(name, why+"; its node did not answer a check either", gossip.Unreachable)
		case !d.View.Alive(name):
			// Declared dead while it lives (a partition that healed):
			// back into our gossip, or its real death goes unprobed.
			if err := d.View.Rejoin(d.ctx, name); err != nil {
				d.log.Warn("could not rejoin a member gossip had declared dead", "member", name, "err", err)
			} else {
				d.log.Info("rejoined a member gossip had declared dead: it answers", "member", name)
			}
		}
	})
}

// outside reports whether name is not in the generation this member
// holds (it left, or was evicted already, or has not entered yet): there
// is no training to save by voting against it, and right after an
// eviction every survivor hears gossip's own verdict on the evicted
// member at once. Without a generation yet, every hint counts. d.mu is
// held.
func (d *detector) outside(name string) bool {
	if d.gen == nil {
		return false
	}
	_, in := d.gen.Member(name)
	return !in
}

// checkOnTime checks name until a check is answered, finds its port
// refusing, or times out on time (see stallFactor).
func (d *detector) checkOnTime(name string) (gossip.Status, error) {
	for range maxStalledChecks {
		limit := stallFactor * d.Probes.CheckTimeout()
		start := d.clock.Now()
		st, err := d.Probes.Check(d.ctx, name)
		took := d.clock.Now().Sub(start)
		if err != nil || (st != gossip.Silent && st != gossip.Unreachable) || took <= limit {
			return st, err
		}
		d.metrics.stalledChecks.Inc()
		d.log.Info("this sidecar stalled during a check: its silence is no evidence", "suspect", name, "took", took, "limit", limit)
	}
	return gossip.Silent, errStalled
}

// errStalled: every check of a peer came back late (see stallFactor).
var errStalled = errors.New("this sidecar stalled through every check")

// watchNeighbours has gossip watch the Quorum members before this one in
// g's ring (see gossip.Watch). Each member is then watched by the Quorum
// members after it, its first checkers: when its process exits, their
// watches close together, their checks find its port refusing, and their
// votes evict it at once.
func (d *detector) watchNeighbours(g *record.Generation) {
	if g == nil {
		return
	}
	d.View.Watch(g.Predecessors(d.self, coordinator.Quorum))
}

// reconcileGossip checks, every reconcileEvery, each member of the
// generation that gossip no longer holds alive and this member is a
// checker of (see checkRumour): gossip forgets a member it declared dead
// (during a partition, a CPU stall), and stops probing it, while the
// member is still registered. A check that gets no answer votes against
// it; one that does brings it back into gossip.
func (d *detector) reconcileGossip(ctx context.Context) {
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			d.reconcile()
		case <-ctx.Done():
			return
		}
	}
}

func (d *detector) reconcile() {
	g := d.generation()
	if g == nil {
		return
	}
	d.watchNeighbours(g) // again: a watch that closed, a member gossip had not seen
	for _, id := range checked(g, d.self) {
		if !d.View.Alive(id) {
			d.check(id, "in the generation but gone from gossip")
		}
	}
}

// checkVotes checks the suspects other members vote against, when this
// member is one of their checkers.
func (d *detector) checkVotes(ctx context.Context) {
	for v := range d.Roster.WatchVotes(ctx) {
		if v.Target == d.self || v.Voter == d.self {
			continue
		}
		if g := d.generation(); g != nil && isChecker(g, v.Target, v.Voter, d.self) {
			d.check(v.Target, v.Voter+" voted against it")
		}
	}
}

// isChecker reports whether me is among the coordinator.Checkers members after
// target in g's ring, the voter skipped.
func isChecker(g *record.Generation, target, voter, me string) bool {
	after := slices.DeleteFunc(g.Successors(target, coordinator.Checkers+1), func(id string) bool { return id == voter })
	return slices.Contains(after[:min(len(after), coordinator.Checkers)], me)
}

// announceLeft announces the confirmed deaths of a new generation (members
// of prev in g.Left not announced already) and returns them: their
// connections are the caller's to reset.
func (d *detector) announceLeft(prev, g *record.Generation) []record.RankedMember {
	var dead []record.RankedMember
	for _, id := range g.Left {
		d.mu.Lock()
		done := d.announced[id]
		delete(d.announced, id)
		d.mu.Unlock()
		if done || prev == nil || id == d.self {
			continue
		}
		if m, in := prev.Member(id); in {
			d.publishDead(id)
			dead = append(dead, m)
		}
	}
	return dead
}

// sweep checks this member's coordinator.Checkers successors in g's ring after
// a confirmed death, if one of them in prev (the ring the dead were in)
// is among the dead: deaths come together (a node, a rack, a preempted
// group of pods: neighbours in ring order, which follows the topology),
// and a peer that died with the one just evicted then gets its votes
// within a check, not whenever a probe happens to reach it. Only the dead
// members' predecessors sweep: when every member swept, each death set off
// three checks of every member at once, on top of the generation every
// sidecar handles at that moment, and on a busy machine those checks timed
// out against live members and voted against them.
func (d *detector) sweep(prev, g *record.Generation, dead []string) {
	if prev == nil || !slices.ContainsFunc(successors(prev, d.self), func(id string) bool { return slices.Contains(dead, id) }) {
		return
	}
	for _, id := range successors(g, d.self) {
		d.check(id, "a sweep after a confirmed death")
	}
}

// trainerStalled: this member's trainer made no step for after (see
// Agent.watchStalls). Its ring neighbours are checked: a silent one holds
// the collective, and its neighbours' trainers stall with this one's, so
// each silent member is checked by all of its neighbours at once.
func (d *detector) trainerStalled(after time.Duration) {
	g := d.generation()
	if g == nil {
		return
	}
	ids := neighbours(g, d.self)
	if len(ids) == 0 {
		return
	}
	d.log.Info("the trainer stalled: checking its ring neighbours", "after", after, "neighbours", ids)
	why := "the trainer made no step for " + after.Round(time.Millisecond).String()
	for _, id := range ids {
		d.checkMaybeAgain(id, why, true)
	}
}

// neighbours returns the coordinator.Checkers members after id in g's ring
// and the coordinator.Checkers before it, each once.
func neighbours(g *record.Generation, id string) []string {
	out := successors(g, id)
	for _, p := range g.Predecessors(id, coordinator.Checkers) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// successors returns the coordinator.Checkers members after id in g's ring.
func successors(g *record.Generation, id string) []string {
	return g.Successors(id, coordinator.Checkers)
}

// announceDead announces a death this sidecar's own vote confirmed, ahead
// of the generation that follows.
func (d *detector) announceDead(name string) {
	d.mu.Lock()
	g := d.gen
	d.announced[name] = true
	d.mu.Unlock()
	if g != nil {
		if m, in := g.Member(name); in {
			// Not the vote's context: a withdraw that cancels it comes too
			// late to undo an eviction.
			d.resetSockets(d.ctx, name, net.ParseIP(m.Addr))
		}
	}
	d.publishDead(name)
	// The dead member's neighbours on both sides, not this member's: a
	// peer cut off or lost with it is most likely next to it in the ring
	// (which follows the topology), on either side; its predecessors
	// sweep only once the generation without it is committed, which a
	// partition that took the leader delays until every candidate on the
	// far side is evicted (bench partition's split: the last member cut
	// off was voted against 0.4 s after the first was evicted, when a
	// probe happened to reach it).
	if g != nil {
		for _, id := range neighbours(g, name) {
			if id != d.self {
				d.check(id, "a sweep after a death this member confirmed")
			}
		}
	}
}

// resetSockets destroys the trainer's connections to a dead peer, so a
// collective blocked on it fails now.
func (d *detector) resetSockets(ctx context.Context, name string, ip net.IP) {
	if d.Resets == nil || ip == nil || ip.Equal(d.advertise) {
		return // off, or a peer on our own address: resetting would cut our own
	}
	n, err := d.Resets.Reset(ctx, ip)
	switch {
	case errors.Is(err, sockreset.ErrUnsupported):
		// logged once by the resetter
	case err != nil:
		d.log.Warn("socket reset failed", "dead", name, "err", err)
	case n > 0:
		d.metrics.socketsReset.Add(float64(n))
		d.log.Info("destroyed connections to the dead member", "dead", name, "sockets", n)
	}
}

// publishDead notes when a member of the generation died (for the
// failure-to-commit metric) and tells the trainer.
func (d *detector) publishDead(name string) {
	now := d.clock.Now()
	d.metrics.deadPeers.Inc()
	d.mu.Lock()
	if d.gen != nil {
		if _, in := d.gen.Member(name); in {
			d.deadAt[name] = now
		}
	}
	d.mu.Unlock()
	d.host.publish(api.Event{Type: api.EventMemberDead, Time: now, Member: name})
	d.log.Info("member confirmed dead", "dead", name)
}

// ReportFailure checks a trainer's report that a collective with peer
// failed. A refused connection to the peer's gossip port means its process
// is gone: this sidecar votes at once. One that connects means it lives
// (the collective failed because a member elsewhere in the ring died);
// one that times out gets a gossip check, which votes if it fails.
func (d *detector) ReportFailure(f api.FailureReport) {
	if !d.started.Load() {
		return
	}
	d.goOwned(func() {
		ctx, cancel := context.WithTimeout(d.ctx, 2*time.Second)
		defer cancel()
		members, err := d.Roster.Members(ctx)
		if err != nil {
			return
		}
		for _, m := range members {
			if m.ID != f.Peer || m.GossipAddr == "" {
				continue
			}
			dl := net.Dialer{Timeout: 300 * time.Millisecond}
			conn, err := dl.DialContext(ctx, "tcp", m.GossipAddr)
			switch {
			case err == nil:
				conn.Close()
				d.log.Info("trainer reported a failed collective, but the peer answers", "peer", f.Peer, "error", f.Error)
			case errors.Is(err, syscall.ECONNREFUSED):
				d.suspectGone(f.Peer, "the trainer's collective with it failed and its gossip port refuses connections")
			default:
				d.check(f.Peer, "the trainer's collective with it failed and its gossip port does not answer")
			}
		}
	})
}

// newRetryBackoff paces retries of a vote while etcd fails: from 50 ms up
// to 1 s apart, until the caller's context ends.
func newRetryBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = time.Second
	b.MaxElapsedTime = 0
	return b
}
