package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// In restart mode a trainer crash is the job's to act on, as torchrun
// restarts every worker when one fails: the member's sidecar reports it
// at once (ReportCrash) and the leader, in attribute, decides.
//
//   - A crash in a generation already superseded is ignored: the job
//     changed meanwhile (another rank's crash of the same generation
//     restarted it, or a death, drain or join did), and the trainer starts
//     again in the new generation. Several ranks crashing together cost
//     one restart, whichever reports first.
//   - A crash while a peer's departure is pending is the peer's, not the
//     trainer's own: a rank blocked in a collective with a peer that died
//     fails with it. The generation without the peer restarts every
//     trainer, and nothing is counted. Pending: committed by the leader
//     first (a death, drain or trainer departure it saw), or being
//     confirmed (votes stand against a member of the generation, or its
//     key timed out and is held), which the leader waits for at most a
//     lease's TTL.
//   - Otherwise the crash counts against the job's restart budget
//     (Generation.Restarts, torchrun's max_restarts): the leader commits
//     the same ring again, numbered anew, and every trainer restarts. Once
//     the budget is spent, or once CrashLoop generations in a row ended
//     with a trainer failing before its first step and, in the last of
//     them, every trainer failed so, it commits the job's stop instead
//     (Generation.Stop), with a message that names the members, their
//     exit and its cause. The last generation's crash waits a moment
//     (crashLoopWait) for the other trainers, started together, to fail as
//     well; when some do not, it is no loop (a trainer killed early time
//     after time, one bad node): the job restarts and the count starts
//     again, and the restart budget bounds it.
//
// A trainer that finishes (its command exits 0, ReportFinished) makes the
// job finishing, as torchrun's agents end one by one once their workers
// succeed: the leader commits no generation after it while a member of it
// is registered as the same process, so that members leaving as their
// commands end restart nobody. A crash after a finish stops the job: the
// finished ranks are not coming back to form another group.

// ReportCrash stores c, the crash of this member's trainer, under
// crashes/<id> on the member's lease, retrying until ctx ends.
func (m *Member) ReportCrash(ctx context.Context, c record.Crash) error {
	return m.reportExit(ctx, c, true)
}

// ReportFinished stores c, the end of this member's trainer's command
// with 0, under crashes/<id> without a lease: the job stays finishing
// after this member's sidecar has gone.
func (m *Member) ReportFinished(ctx context.Context, c record.Crash) error {
	c.Finished = true
	return m.reportExit(ctx, c, false)
}

func (m *Member) reportExit(ctx context.Context, c record.Crash, onLease bool) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("trainer exit: %w", err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode trainer exit: %w", err)
	}
	key := m.job.cfg.Prefix() + record.CrashKey(m.id)
	return retry(ctx, m.job.cfg.OnError, func(ctx context.Context) error {
		var opts []clientv3.OpOption
		if onLease {
			opts = append(opts, clientv3.WithLease(clientv3.LeaseID(m.lease.Load())))
		}
		_, err := m.job.client.Put(ctx, key, string(b), opts...)
		return err
	})
}

// readCrashes reads the crashes stored at rev, at the start of a term.
func (m *Member) readCrashes(ctx context.Context, st *leaderState, rev int64) error {
	resp, err := m.job.client.Get(ctx, m.job.cfg.Prefix()+record.CrashesDir, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		m.applyCrash(st, string(kv.Key), kv.Value)
	}
	return nil
}

// applyCrashes records what the crashes watch delivered.
func (m *Member) applyCrashes(st *leaderState, events []*clientv3.Event) {
	for _, ev := range events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(st.crashes, strings.TrimPrefix(string(ev.Kv.Key), m.job.cfg.Prefix()+record.CrashesDir))
			continue
		}
		m.applyCrash(st, string(ev.Kv.Key), ev.Kv.Value)
	}
}

func (m *Member) applyCrash(st *leaderState, key string, value []byte) {
	id, c, err := record.DecodeCrash(strings.TrimPrefix(key, m.job.cfg.Prefix()), value)
	if err != nil {
		m.job.reportBad(key, err)
		return
	}
	if st.crashes == nil {
		st.crashes = map[string]record.Crash{}
	}
	st.crashes[id] = c
}

// crashed returns the first crash reported in the current generation by
// one of its members; ok is false when there is none.
func (st *leaderState) crashed() (id string, c record.Crash, ok bool) {
	if st.gen == nil || st.gen.Stop != nil {
		return "", record.Crash{}, false
	}
	for mid, mc := range st.crashes {
		if _, in := st.gen.Member(mid); !in || mc.Generation != st.gen.Number || mc.Finished {
			continue
		}
		if !ok || mc.Time.Before(c.Time) || (mc.Time.Equal(c.Time) && mid < id) {
			id, c, ok = mid, mc, true
		}
	}
	return id, c, ok
}

// attribute acts on a crash in the current generation (see above). It
// runs after evaluate, which commits at once any departure the leader
// knows of: what is left to find here is a departure being confirmed.
func (c *committer) attribute(ctx context.Context, now time.Time) error {
	st := c.st
	id, crash, ok := st.crashed()
	if !ok {
		c.releaseCrash()
		return nil
	}
	peer, err := c.departing(ctx, crash.Generation)
	if err != nil {
		// Unread votes may hide a death: wait as for one, and look again.
		c.m.log.Warn("cannot read the votes to attribute a trainer crash", "crashed", id, "err", err)
		peer = "(votes unread)"
	}
	var wait time.Duration
	switch {
	case peer != "":
		wait = c.m.job.cfg.TTL + expirySlack
		if c.crashHeldAt.IsZero() {
			c.m.log.Info("a trainer crashed while a peer's death is being confirmed: waiting for it before the crash counts",
				"crashed", id, "peer", peer, "generation", crash.Generation)
		}
	case st.loopEnds(crash) && len(st.crashedAlike(crash)) < len(st.gen.Members):
		// The stop's message names every worker that failed so: the
		// others started with this one and fail within moments.
		wait = crashLoopWait
	}
	if wait > 0 {
		if c.crashHeldAt.IsZero() {
			c.crashHeldAt = now
		}
		if until := c.crashHeldAt.Add(wait); now.Before(until) {
			c.armCrashHold(until.Sub(now))
			return nil
		}
	}
	c.releaseCrash()
	return c.restartOrStop(ctx, id, crash)
}

// crashLoopWait bounds how long the stop of a crash loop waits for the
// crashes of the generation's other trainers, so that its message names
// every worker that failed: started together, the same script fails on
// each within a second or so. It costs nothing but at a stop.
const crashLoopWait = 2 * time.Second

// departing returns a member of the generation whose death is being
// confirmed: a peer votes against it, or its key timed out and is held.
// The crashed members' own sidecars reported, so they are not among them.
func (c *committer) departing(ctx context.Context, gen int64) (string, error) {
	st := c.st
	suspect := func(id string) bool {
		_, in := st.gen.Member(id)
		return in && (st.crashes[id].Generation != gen)
	}
	for id := range st.held {
		if suspect(id) {
			return id, nil
		}
	}
	p := c.m.job.cfg.Prefix() + record.SuspectsDir
	gctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	resp, err := c.m.job.client.Get(gctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return "", fmt.Errorf("read votes: %w", err)
	}
	for _, kv := range resp.Kvs {
		target, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), p), "/")
		if suspect(target) {
			return target, nil
		}
	}
	return "", nil
}

// armCrashHold wakes the leader in d to look at a held crash again.
func (c *committer) armCrashHold(d time.Duration) {
	if c.crashTimer != nil {
		c.crashTimer.Stop()
	}
	c.crashTimer = time.NewTimer(d)
	c.crashC = c.crashTimer.C
}

// releaseCrash forgets a held crash.
func (c *committer) releaseCrash() {
	if c.crashTimer != nil {
		c.crashTimer.Stop()
	}
	c.crashTimer, c.crashC, c.crashHeldAt = nil, nil, time.Time{}
}

// loopEnds reports whether crash, counted, makes CrashLoop generations
// in a row that a trainer failing before its first step ended.
func (st *leaderState) loopEnds(crash record.Crash) bool {
	return crash.CrashLoop > 0 && !crash.FirstStep && st.gen.FailedStarts+1 >= int64(crash.CrashLoop)
}

// crashedAlike returns the members of the generation whose trainers
// failed in it as crash did: the same exit, before their first step.
func (st *leaderState) crashedAlike(crash record.Crash) []string {
	var out []string
	for _, m := range st.gen.Members {
		mc, ok := st.crashes[m.ID]
		if ok && mc.Generation == st.gen.Number && mc.FirstStep == crash.FirstStep && mc.Exits(false) == crash.Exits(false) {
			out = append(out, m.ID)
		}
	}
	return out
}

// restartOrStop counts member id's crash: it commits the job's restart,
// or its stop once the crash loop is long enough or the budget is spent.
func (c *committer) restartOrStop(ctx context.Context, id string, crash record.Crash) error {
	st, cfg := c.st, c.m.job.cfg
	prev := st.gen
	failed := int64(0)
	if !crash.FirstStep {
		failed = prev.FailedStarts + 1
	}
	var stop *record.Stop
	loop, crashed := st.loopEnds(crash), st.crashedAlike(crash)
	if loop && len(crashed) < len(prev.Members) {
		// Some trainers did not fail so (attribute waited for them): no
		// crash loop, and the count starts again. A worker whose trainer
		// alone keeps failing spends the restart budget instead.
		loop, failed = false, 0
	}
	switch {
	case len(st.finished()) > 0:
		stop = &record.Stop{Crashed: []string{id}, Message: fmt.Sprintf("worker %s %s after %s finished%s",
			id, crash.Exits(false), names(st.finished()), colon(crash.Cause()))}
	case loop:
		who := "every worker " + crash.Exits(false) + " before its first step"
		if len(crashed) == 1 {
			who = "worker " + names(crashed) + " " + crash.Exits(false) + " before its first step"
		}
		if failed > 1 {
			who += fmt.Sprintf(", %d generations in a row", failed)
		}
		stop = &record.Stop{Message: who + colon(crash.Cause()), Crashed: crashed}
	case prev.Restarts >= int64(crash.MaxRestarts):
		stop = &record.Stop{Crashed: []string{id}, Message: fmt.Sprintf("worker %s %s, and the job has no restart left (%d of --max-restarts %d spent)%s",
			id, crash.Exits(false), prev.Restarts, crash.MaxRestarts, colon(crash.Cause()))}
	}
	if stop != nil {
		stop.Message, stop.ExitCode = record.TrimText(stop.Message, record.MaxTextLen), cmp.Or(crash.ExitCode, 1)
		next := cfg.again(prev, st.floor)
		next.Restarts, next.FailedStarts, next.Stop, next.Reason = prev.Restarts, failed, stop, "stop: trainer crashes"
		c.m.log.Error("trainer crashes stop the job", "why", stop.Message, "exit_code", stop.ExitCode)
		return c.commit(ctx, next, delta{})
	}
	next, d := st.plan(cfg) // joins batched meanwhile restart with it
	if next == nil {
		next, d = cfg.again(prev, st.floor), delta{}
	}
	d.restarted = append(d.restarted, id)
	next.Restarts, next.FailedStarts = prev.Restarts+1, failed
	next.Reason = fmt.Sprintf("%s: its trainer %s (restart %d of %d)", d, crash.Exits(false), next.Restarts, crash.MaxRestarts)
	return c.commit(ctx, next, d)
}

// names lists ids for a message, at most five of them.
func names(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + fmt.Sprintf(" and %d more", len(ids)-5)
	}
	if len(ids) > 1 {
		return strings.Join(ids[:len(ids)-1], ", ") + " and " + ids[len(ids)-1]
	}
	return strings.Join(ids, "")
}

func colon(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// again returns prev's ring numbered anew: the generation of a restart
// that changes no member.
func (c Config) again(prev *record.Generation, floor int64) *record.Generation {
	next := &record.Generation{
		Number:     max(prev.Number, floor) + 1,
		Members:    slices.Clone(prev.Members),
		Standby:    slices.Clone(prev.Standby),
		WorldSize:  prev.WorldSize,
		MasterAddr: prev.MasterAddr,
		Paused:     prev.Paused,
	}
	next.MasterPort = c.MasterPort + int(next.Number%int64(c.MasterPortRange))
	next.BuildIndex()
	return next
}

// finished returns the members of the current generation whose trainers
// finished in it, sorted.
func (st *leaderState) finished() []string {
	var ids []string
	for id, c := range st.crashes {
		if _, in := st.gen.Member(id); in && c.Finished && c.Generation == st.gen.Number {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// lastHolds reports whether a stopped or finishing job stays as it is:
// some member of its last generation is still registered as the same
// process.
func (st *leaderState) lastHolds() bool {
	for _, m := range st.gen.Members {
		if info, ok := st.members[m.ID]; ok && info.Instance == m.Instance {
			return true
		}
	}
	return false
}
