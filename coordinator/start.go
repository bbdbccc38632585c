package coordinator

import (
	"slices"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

// A job that has not trained yet forms its first generation once, with
// the members it expects, rather than once for each member as it arrives:
// in restart mode every formation restarts every process, and a restart
// at start catches scripts loading or saving their first checkpoint. As
// torchrun's rendezvous waits for its max nodes until the last call, the
// leader commits the first generation once the active members hold
// Config.ExpectedSize slots, or once Config.StartWindow has passed since
// they first held Policy.Min. Deaths and drains are not held up: before
// the first generation there is no ring to take anyone out of, and after
// it this rule is over.
//
// The window must hold when the leader changes during the start, so it is
// read from what every leader reads, the member records: each says since
// when the member is active (record.MemberInfo.ActiveSince), and the
// window opened when the active members, taken in that order, first held
// Min slots. No key of its own is written for it: nothing is left to
// clean up after the start, or half written by a leader that crashed, and
// a member that leaves during the start takes its part of the count with
// it. The times come from the members' clocks, which NTP keeps within
// milliseconds of each other; so that one clock far ahead cannot hold the
// start back, a leader never takes a member for active later than it first
// saw it active (for the members already active when its term began, the
// term's start): the window ends at most StartWindow after the leader saw
// Min slots active.

// startOpen reports whether the job's first generation may be committed
// at now, given the registered members and when this leader first saw
// each active (seen). When it may not, end is when the start window
// closes, or zero while fewer than Policy.Min slots are active (the
// window has not opened).
func (c Config) startOpen(members map[string]record.MemberInfo, seen map[string]time.Time, now time.Time) (open bool, end time.Time) {
	if !c.waitsAtStart() {
		return true, time.Time{}
	}
	type arrival struct {
		at    time.Time
		slots int
	}
	var active []arrival
	total := 0
	for id, m := range members {
		if m.State != record.StateActive {
			continue
		}
		at := m.ActiveSince
		if s, ok := seen[id]; ok && (at.IsZero() || s.Before(at)) {
			at = s
		}
		active = append(active, arrival{at, m.Slots})
		total += m.Slots
	}
	if total >= c.ExpectedSize {
		return true, time.Time{}
	}
	slices.SortFunc(active, func(a, b arrival) int { return a.at.Compare(b.at) })
	held := 0
	for _, a := range active {
		if held += a.slots; held >= c.Policy.Min {
			end = a.at.Add(c.StartWindow)
			return !now.Before(end), end
		}
	}
	return false, time.Time{}
}

// waitsAtStart reports whether the first generation waits for
// ExpectedSize.
func (c Config) waitsAtStart() bool { return c.ExpectedSize > 0 && c.StartWindow > 0 }

// noteActive records when the leader first saw a member active, for
// startOpen; a member not active is forgotten.
func (st *leaderState) noteActive(info record.MemberInfo, now time.Time) {
	if info.State != record.StateActive {
		delete(st.seenActive, info.ID)
		return
	}
	if _, ok := st.seenActive[info.ID]; !ok {
		st.seenActive[info.ID] = now
	}
}
