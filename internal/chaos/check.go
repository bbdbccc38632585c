package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// CheckConfig bounds what the checker tolerates.
type CheckConfig struct {
	// Slack is how long after a freeze or a partition ends its member's
	// lease may still be seen expire: the TTL and a detection round.
	Slack time.Duration
	// DivergenceBound is how long two live members may disagree on the
	// generation (one got the watch event before the other).
	DivergenceBound time.Duration
	// DeadlockAfter is how long the job may go without a step while enough
	// members are alive before it counts as deadlocked.
	DeadlockAfter time.Duration
	// PorcupineTimeout bounds the linearizability check.
	PorcupineTimeout time.Duration
}

// DefaultCheckConfig suits the sidecar's defaults (TTL 3 s, sub-second
// gossip detection).
func DefaultCheckConfig() CheckConfig {
	return CheckConfig{Slack: 5 * time.Second, DivergenceBound: 5 * time.Second, DeadlockAfter: 20 * time.Second,
		PorcupineTimeout: 20 * time.Second}
}

// Report is the checker's verdict on a history.
type Report struct {
	// Linearizable: porcupine found the generation register's history
	// legal (see model.go).
	Linearizable          bool
	DuplicateGenerations  int
	DecreasingGenerations int
	// SplitBrain counts commits by a member that did not lead the
	// election when etcd applied them.
	SplitBrain int
	// LiveEvictions counts member keys deleted while their registration
	// was current and their sidecar ran, unfrozen and reachable.
	LiveEvictions int
	// OutageExpiries counts member keys etcd itself deleted because an
	// outage outlived their lease (a frozen etcd expires every lease when
	// it resumes): no member evicted them, and each member registers
	// again in place; what that costs the job, SpuriousGenerations counts.
	OutageExpiries int
	// Unsynced counts live members whose last delivered generation at the
	// end is not the latest committed one.
	Unsynced int
	// Divergences counts spells longer than DivergenceBound in which live
	// members held different generations.
	Divergences int
	// LostCommittedSteps sums how far the job's step counter went back
	// when a generation started stepping.
	LostCommittedSteps int64
	// SpuriousGenerations counts commits that changed nothing, or left
	// out a member that no fault had touched.
	SpuriousGenerations int
	// Deadlocks counts stalls of training longer than DeadlockAfter.
	Deadlocks int
	// ResumeS are the faults' times to resume, in seconds.
	ResumeS []float64
	// Violations says what each counted violation was, and which fault
	// came last before it.
	Violations []string
	// ByKind counts violations by the kind of the last fault before them
	// ("start" before the first).
	ByKind map[Kind]map[string]int
}

// OK reports whether the history breaks no property.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Check checks a history.
func Check(h History, cfg CheckConfig) Report {
	c := &checker{h: h, cfg: cfg, r: Report{ByKind: map[Kind]map[string]int{}}}
	c.register()
	c.numbers()
	c.leaders()
	c.evictions()
	c.spurious()
	c.lostSteps()
	c.divergence()
	c.deadlocks()
	c.synced()
	for _, f := range h.Faults {
		if f.Resumed.IsZero() {
			continue
		}
		from := f.At
		if !f.End.IsZero() && (f.Kind == EtcdRestart || f.Kind == EtcdFreeze) {
			from = f.End // training goes on through an outage: resume counts from its end
		}
		c.r.ResumeS = append(c.r.ResumeS, max(f.Resumed.Sub(from).Seconds(), 0))
	}
	return c.r
}

type checker struct {
	h   History
	cfg CheckConfig
	r   Report
}

// violation records one violation of property what at t.
func (c *checker) violation(what string, t time.Time, format string, args ...any) {
	kind := Kind("start")
	for _, f := range c.h.Faults {
		if !f.At.After(t) {
			kind = f.Kind
		}
	}
	if c.r.ByKind[kind] == nil {
		c.r.ByKind[kind] = map[string]int{}
	}
	c.r.ByKind[kind][what]++
	c.r.Violations = append(c.r.Violations, fmt.Sprintf("%s at +%.1fs (after %s): %s", what,
		t.Sub(c.h.Start).Seconds(), kind, fmt.Sprintf(format, args...)))
}

func (c *checker) register() {
	ok, why := checkRegister(c.h, c.cfg.PorcupineTimeout)
	c.r.Linearizable = ok
	if !ok {
		c.violation("not_linearizable", c.h.End, "%s", why)
	}
}

// numbers: at most one generation per number, and numbers only grow.
func (c *checker) numbers() {
	seen := map[int64]bool{}
	for i, g := range c.h.Commits {
		if seen[g.Number] {
			c.r.DuplicateGenerations++
			c.violation("duplicate_generation", g.Observed, "generation %d committed again (by %s)", g.Number, g.Leader)
		}
		seen[g.Number] = true
		if i > 0 && g.Number < c.h.Commits[i-1].Number {
			c.r.DecreasingGenerations++
			c.violation("decreasing_generation", g.Observed, "generation %d committed after %d", g.Number, c.h.Commits[i-1].Number)
		}
	}
}

// leaders: every generation is committed by the leader of its term.
func (c *checker) leaders() {
	for _, g := range c.h.Commits {
		if g.Leader != g.Term {
			c.r.SplitBrain++
			c.violation("split_brain", g.Observed, "generation %d committed by %q while %q led the election", g.Number, g.Leader, g.Term)
		}
	}
}

// evictions: no current registration of a live sidecar is revoked.
func (c *checker) evictions() {
	current := map[string]int64{} // member -> lease of its latest registration
	regs := slices.Clone(c.h.Registrations)
	slices.SortFunc(regs, func(a, b Registration) int { return cmp.Compare(a.Revision, b.Revision) })
	next := 0
	for _, e := range c.h.Evictions {
		for ; next < len(regs) && regs[next].Revision < e.Revision; next++ {
			current[regs[next].Member] = regs[next].Lease
		}
		if lease, ok := current[e.Member]; ok && lease != e.Lease {
			continue // a registration the member itself had already replaced
		}
		life := c.h.Workers[e.Member]
		if life == nil || !life.SidecarLive(e.At, c.cfg.Slack) {
			continue
		}
		if !life.TrainerGone.IsZero() && !life.TrainerGone.After(e.At) {
			continue // its trainer is gone: the member may go with it
		}
		if !e.Recorded && c.expiredByOutage(e.At) {
			c.r.OutageExpiries++
			continue
		}
		c.r.LiveEvictions++
		c.violation("live_eviction", e.At, "%s's registration (lease %x) revoked while its sidecar ran", e.Member, e.Lease)
	}
}

// outageExpiry bounds how long after etcd returns it expires the leases
// an outage outlived: its lessor revokes them within a check (500 ms).
const outageExpiry = 2 * time.Second

// expiredByOutage reports whether a deletion at t came from etcd expiring
// leases during or right after an outage.
func (c *checker) expiredByOutage(t time.Time) bool {
	for _, iv := range c.h.EtcdDown {
		if iv.Contains(t, outageExpiry) {
			return true
		}
	}
	return false
}

// spurious: a generation must change the ring, and leave out only members
// a fault touched.
func (c *checker) spurious() {
	for i := 1; i < len(c.h.Commits); i++ {
		prev, g := c.h.Commits[i-1], c.h.Commits[i]
		if slices.Equal(prev.Members, g.Members) && prev.Paused == g.Paused {
			c.r.SpuriousGenerations++
			c.violation("spurious_generation", g.Observed, "generation %d has the same ring as %d (%q)", g.Number, prev.Number, g.Reason)
			continue
		}
		kept := map[string]bool{}
		for _, id := range slices.Concat(g.Members, g.Standby) {
			kept[id] = true
		}
		for _, id := range prev.Members {
			if kept[id] {
				continue
			}
			if life := c.h.Workers[id]; life == nil || !life.Disturbed(g.Observed) {
				c.r.SpuriousGenerations++
				c.violation("spurious_generation", g.Observed, "generation %d leaves out %s, which no fault touched (%q)", g.Number, id, g.Reason)
				break
			}
		}
	}
}

// lostSteps: a generation starts from the newest step its members
// completed before it.
func (c *checker) lostSteps() {
	first := map[int64]int64{}        // generation -> its lowest step
	workersOf := map[int64][]string{} // generation -> workers that stepped in it
	for _, s := range c.h.Steps {
		if f, ok := first[s.Generation]; !ok || s.Step < f {
			first[s.Generation] = s.Step
		}
		if !slices.Contains(workersOf[s.Generation], s.Worker) {
			workersOf[s.Generation] = append(workersOf[s.Generation], s.Worker)
		}
	}
	for gen, start := range first {
		var before int64 = -1
		var at time.Time
		for _, s := range c.h.Steps {
			if s.Generation < gen && s.Step > before && slices.Contains(workersOf[gen], s.Worker) {
				before, at = s.Step, s.At
			}
		}
		if lost := before + 1 - start; before >= 0 && lost > 0 {
			c.r.LostCommittedSteps += lost
			c.violation("lost_committed_steps", at, "generation %d started at step %d after its members had completed step %d", gen, start, before)
		}
	}
}

// divergence: live members agree on the generation within the bound.
func (c *checker) divergence() {
	byWorker := map[string][]Delivery{}
	for _, d := range c.h.Deliveries {
		byWorker[d.Worker] = append(byWorker[d.Worker], d)
	}
	const tick = 100 * time.Millisecond
	var since time.Time // start of the current disagreement
	counted := false
	for t := c.h.Start; !t.After(c.h.End); t = t.Add(tick) {
		held := map[int64][]string{}
		for id, ds := range byWorker {
			// A sidecar back from a freeze needs the slack to learn
			// that its registration ran out.
			life := c.h.Workers[id]
			if life == nil || !life.SidecarLive(t, c.cfg.Slack) {
				continue
			}
			var cur int64 = -1
			for _, d := range ds {
				if d.Received.After(t) {
					break
				}
				cur = d.Number
			}
			if cur >= 0 {
				held[cur] = append(held[cur], id)
			}
		}
		if len(held) < 2 {
			since, counted = time.Time{}, false
			continue
		}
		if since.IsZero() {
			since = t
		}
		if !counted && t.Sub(since) > c.cfg.DivergenceBound {
			counted = true
			c.r.Divergences++
			c.violation("divergence", since, "live members held generations %v for over %s", held, c.cfg.DivergenceBound)
		}
	}
}

// deadlocks: training never stalls longer than the bound while at least
// the policy's minimum of workers runs.
func (c *checker) deadlocks() {
	times := make([]time.Time, 0, len(c.h.Steps)+1)
	for _, s := range c.h.Steps {
		times = append(times, s.At)
	}
	slices.SortFunc(times, time.Time.Compare)
	if len(times) == 0 {
		return
	}
	times = append(times, c.h.End)
	for i := 1; i < len(times); i++ {
		from := times[i-1]
		if times[i].Sub(from) <= c.cfg.DeadlockAfter || c.live(from.Add(c.cfg.DeadlockAfter)) < c.h.Min {
			continue
		}
		c.r.Deadlocks++
		// The last step before a stall can come a moment before the
		// fault that caused it: the fault is the one before from+1s.
		c.violation("deadlock", from.Add(time.Second), "no step for %.1fs with %d workers running", times[i].Sub(from).Seconds(), c.live(from.Add(c.cfg.DeadlockAfter)))
	}
}

// live counts the workers whose sidecar and trainer both run at t.
func (c *checker) live(t time.Time) int {
	n := 0
	for _, l := range c.h.Workers {
		if l.SidecarLive(t, 0) && (l.TrainerGone.IsZero() || t.Before(l.TrainerGone)) {
			n++
		}
	}
	return n
}

// synced: every live member ends on the latest generation.
func (c *checker) synced() {
	if len(c.h.Commits) == 0 {
		return
	}
	latest := c.h.Commits[len(c.h.Commits)-1].Number
	last := map[string]int64{}
	for _, d := range c.h.Deliveries {
		last[d.Worker] = d.Number
	}
	for _, id := range slices.Sorted(maps.Keys(c.h.Workers)) {
		if !c.h.Workers[id].SidecarLive(c.h.End, 0) {
			continue
		}
		if n, ok := last[id]; !ok || n != latest {
			c.r.Unsynced++
			c.violation("unsynced", c.h.End, "%s ended on generation %d, not the latest %d", id, n, latest)
		}
	}
}
