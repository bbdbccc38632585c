package chaos

import (
	"slices"
	"time"
)

// History is what a run recorded. Times are on this machine's clock, which
// the sidecars and trainers share.
type History struct {
	Start, End time.Time
	// Commits are the generation key's writes in etcd revision order.
	Commits []Commit
	// Deliveries are the generation events each sidecar's trainer API
	// streamed, per worker in the order they came.
	Deliveries []Delivery
	// Evictions are deletions of member keys, in revision order.
	Evictions []Eviction
	// Registrations are writes of member keys (the lease a member is on).
	Registrations []Registration
	// Steps are the trainers' step lines.
	Steps []Step
	// Faults are the events played, in order.
	Faults []Fault
	// Workers is every worker's life, by id.
	Workers map[string]*Life
	// EtcdDown are the intervals etcd was killed or frozen.
	EtcdDown []Interval
	// Min is the policy's smallest world size.
	Min int
}

// Commit is one write of the generation key.
type Commit struct {
	Number  int64
	Members []string
	Standby []string
	Paused  bool
	// Leader is the committer the generation names.
	Leader string
	// Term is the member whose election key led when etcd applied the
	// write (the lowest create revision under election/); "" if none.
	Term     string
	Revision int64
	// Observed is when the recorder's watch delivered the write.
	Observed time.Time
	Reason   string
}

// Delivery is one generation event a sidecar streamed to its trainer API.
type Delivery struct {
	Worker  string
	Number  int64
	Members []string
	// Sent is the event's own time (the sidecar's); Received when the
	// recorder read it.
	Sent, Received time.Time
}

// Eviction is the deletion of a member key.
type Eviction struct {
	Member   string
	Lease    int64
	Revision int64
	At       time.Time
	// Recorded: an eviction record (evicted/<id>) named the lease first:
	// the protocol evicted it (or the member left), etcd did not expire it.
	Recorded bool
}

// Registration is a write of a member key on a lease.
type Registration struct {
	Member   string
	Lease    int64
	Revision int64
	At       time.Time
}

// Step is one step line of a trainer.
type Step struct {
	Worker     string
	Step       int64
	Generation int64
	World      int
	At         time.Time
}

// Interval is [From, To); a zero To is still open.
type Interval struct{ From, To time.Time }

// Contains reports whether t is in the interval, widened by slack after
// its end (what an event takes to surface).
func (iv Interval) Contains(t time.Time, slack time.Duration) bool {
	return !t.Before(iv.From) && (iv.To.IsZero() || t.Before(iv.To.Add(slack)))
}

// Life is a worker's processes' history.
type Life struct {
	ID      string
	Started time.Time
	// SidecarGone and TrainerGone are when each process was killed or
	// ended (zero: still running at the end).
	SidecarGone, TrainerGone time.Time
	// Drained is when its sidecar was told to leave (SIGTERM).
	Drained time.Time
	// Frozen and Partitioned are when it was SIGSTOPped or cut off.
	Frozen, Partitioned []Interval
}

// Disturbed reports whether anything was done to the worker at or before
// t: a member that was faulted may leave the ring, an undisturbed one may
// not.
func (l *Life) Disturbed(t time.Time) bool {
	at := func(x time.Time) bool { return !x.IsZero() && !x.After(t) }
	if at(l.SidecarGone) || at(l.TrainerGone) || at(l.Drained) {
		return true
	}
	for _, iv := range slices.Concat(l.Frozen, l.Partitioned) {
		if at(iv.From) {
			return true
		}
	}
	return false
}

// SidecarLive reports whether the sidecar ran, unfrozen and reachable, at
// t; slack widens each freeze and partition past its end, for the lease
// that ran out meanwhile to be seen gone.
func (l *Life) SidecarLive(t time.Time, slack time.Duration) bool {
	if t.Before(l.Started) || (!l.SidecarGone.IsZero() && !t.Before(l.SidecarGone)) ||
		(!l.Drained.IsZero() && !t.Before(l.Drained)) {
		return false
	}
	for _, iv := range slices.Concat(l.Frozen, l.Partitioned) {
		if iv.Contains(t, slack) {
			return false
		}
	}
	return true
}

// Fault is one event of the schedule as it was played.
type Fault struct {
	Kind    Kind
	Targets []string
	// At is when it struck; End when it was undone (a SIGCONT, etcd back),
	// zero for faults that are not undone.
	At, End time.Time
	// Resumed is when every survivor stepped again in the newest
	// generation; zero if they did not within the deadlock bound.
	Resumed time.Time
}
