package coordinator

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ringside/ringside/coordinator/record"
)

// delta is what a planned generation changes against the previous one.
type delta struct {
	joined, left, drained, dropped, restarted []string
	// detached: survivors whose registration turned pending, as their
	// trainer went away (the sidecar's trainer liveness).
	detached      []string
	pausedChanged bool
}

// urgent reports whether the change must be committed at once: anything but
// pure joins, which wait for the settle window.
func (d delta) urgent() bool {
	return len(d.joined) == 0 || len(d.left) > 0 || len(d.drained) > 0 || len(d.dropped) > 0 ||
		len(d.restarted) > 0 || len(d.detached) > 0 || d.pausedChanged
}

func (d delta) String() string {
	var parts []string
	for _, p := range []struct {
		what string
		ids  []string
	}{{"join", d.joined}, {"leave", d.left}, {"drain", d.drained}, {"policy", d.dropped}, {"restart", d.restarted}, {"trainer gone", d.detached}} {
		if len(p.ids) == 0 {
			continue
		}
		ids := p.ids
		more := ""
		if len(ids) > 5 {
			more = fmt.Sprintf(" (+%d more)", len(ids)-5)
			ids = ids[:5]
		}
		parts = append(parts, p.what+" "+strings.Join(ids, ",")+more)
	}
	if d.pausedChanged {
		parts = append(parts, "pause changed")
	}
	return strings.Join(parts, "; ")
}

// plan builds the generation that should follow prev (nil for none) given
// the registered members. It returns nil when nothing would change. The
// new number is above both prev's and floor: floor is the highest number
// any generation may have been committed with, which the leader knows
// beyond prev when the generation key was lost (numbers must only grow, or
// every member would ignore the new generations). A nil prev or a floor
// alone still means "no generation to build on".
func (c Config) plan(prev *record.Generation, floor int64, members map[string]record.MemberInfo) (*record.Generation, delta) {
	if prev == nil {
		prev = &record.Generation{}
	}
	var survivors, others []record.MemberInfo
	for _, pm := range prev.Members {
		if m, ok := members[pm.ID]; ok && m.State == record.StateActive {
			survivors = append(survivors, m)
		}
	}
	standbyRank := make(map[string]int, len(prev.Standby))
	for i, id := range prev.Standby {
		standbyRank[id] = i
	}
	for _, m := range members {
		if _, in := prev.Member(m.ID); !in && m.State == record.StateActive {
			others = append(others, m)
		}
	}
	// Standby members first, in their order, then newcomers in join order.
	slices.SortFunc(others, func(a, b record.MemberInfo) int {
		ra, aok := standbyRank[a.ID]
		rb, bok := standbyRank[b.ID]
		switch {
		case aok && bok:
			return cmp.Compare(ra, rb)
		case aok:
			return -1
		case bok:
			return 1
		}
		return cmp.Or(cmp.Compare(a.JoinRevision, b.JoinRevision), cmp.Compare(a.ID, b.ID))
	})

	selected, world := c.Policy.selectMembers(append(slices.Clip(survivors), others...))
	keptSurvivors := survivors[:min(selected, len(survivors))]
	newcomers := others[:max(0, selected-len(survivors))]
	standby := others[len(newcomers):]

	ring := appendOrder(keptSurvivors, newcomers)
	if c.Orderer != nil {
		ordered := c.Orderer.Order(slices.Clone(keptSurvivors), slices.Clone(newcomers))
		if checkOrder(ordered, keptSurvivors, newcomers) {
			ring = ordered
		} else {
			c.logger().Warn("ring orderer broke its contract; survivors keep their order and newcomers follow in join order",
				"job", c.Job, "orderer", fmt.Sprintf("%T", c.Orderer))
		}
	}

	next := &record.Generation{
		Number:    max(prev.Number, floor) + 1,
		WorldSize: world,
		Paused:    world < c.Policy.Min,
	}
	rank := 0
	for _, m := range ring {
		next.Members = append(next.Members, record.RankedMember{ID: m.ID, Addr: m.Addr, Rank: rank, Slots: m.Slots, Incarnation: m.Incarnation, Instance: m.Instance})
		rank += m.Slots
	}
	for _, m := range standby {
		next.Standby = append(next.Standby, m.ID)
	}
	if len(next.Members) > 0 {
		next.MasterAddr = next.Members[0].Addr
	}
	next.MasterPort = c.MasterPort + int(next.Number%int64(c.MasterPortRange))
	next.BuildIndex()

	d := diff(prev, next, members)
	if sameRing(prev, next) && next.Paused == prev.Paused && prev.Number > 0 {
		return nil, d
	}
	if prev.Number == 0 && len(next.Members) == 0 {
		return nil, d // nothing to commit yet
	}
	return next, d
}

// selectMembers takes candidates in priority order while they fit Max, then
// drops the lowest-priority ones until the world size is a multiple of Unit.
// It returns how many of the first candidates are selected and their slots.
func (p Policy) selectMembers(candidates []record.MemberInfo) (n, world int) {
	unit := max(p.Unit, 1)
	for n < len(candidates) {
		s := candidates[n].Slots
		if p.Max > 0 && world+s > p.Max {
			break
		}
		world += s
		n++
	}
	for n > 0 && world%unit != 0 {
		n--
		world -= candidates[n].Slots
	}
	return n, world
}

func diff(prev, next *record.Generation, members map[string]record.MemberInfo) delta {
	var d delta
	for _, m := range next.Members {
		switch p, ok := prev.Member(m.ID); {
		case !ok:
			d.joined = append(d.joined, m.ID)
		case p.Incarnation != m.Incarnation, p.Instance != m.Instance:
			// A trainer restart, or a new process under the same id.
			d.restarted = append(d.restarted, m.ID)
		}
	}
	for _, m := range prev.Members {
		if _, ok := next.Member(m.ID); ok {
			continue
		}
		switch info, ok := members[m.ID]; {
		case !ok:
			d.left = append(d.left, m.ID)
		case info.State == record.StateDraining:
			d.drained = append(d.drained, m.ID)
		case info.State == record.StatePending:
			d.detached = append(d.detached, m.ID)
		default:
			d.dropped = append(d.dropped, m.ID)
		}
	}
	d.pausedChanged = prev.Number > 0 && prev.Paused != next.Paused
	return d
}

func sameRing(a, b *record.Generation) bool {
	return slices.Equal(a.Members, b.Members)
}
