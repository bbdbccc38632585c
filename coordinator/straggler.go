package coordinator

import (
	"cmp"
	"slices"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar/quantile"
)

// minStragglerPeers is the fewest members reporting compute times that
// the leader compares: of two, neither is the job's pace.
const minStragglerPeers = 3

// stragglerTrack is what the leader follows of one ring member.
type stragglerTrack struct {
	last     int64 // the step of its newest status looked at
	slowFrom int64 // the first step of its current slow run; 0: not slow
	fastFrom int64 // named: the first step back at the job's pace; 0: not
}

// stragglers finds the ring's stragglers from the members' statuses: a
// member whose compute time per step stays above Factor times the ring's
// median for Window steps is named; a named one whose compute time stays
// below the clearing threshold (halfway between the median and Factor
// times it) for Window steps is cleared. The band between the two keeps
// a member near the threshold from being named and cleared in turn.
type stragglers struct {
	cfg    StragglerConfig
	gen    int64 // the generation the tracks are of
	tracks map[string]*stragglerTrack
	named  map[string]record.Straggler
}

func newStragglers(cfg StragglerConfig) *stragglers {
	return &stragglers{cfg: cfg, tracks: map[string]*stragglerTrack{}, named: map[string]record.Straggler{}}
}

// stragglerView is what the leader knows when it looks.
type stragglerView struct {
	gen      *record.Generation
	members  map[string]record.MemberInfo
	statuses map[string]record.Status
	// resizing: the leader has a generation planned but not committed
	// yet (joins batching, a start window).
	resizing bool
	min      int
	leader   string
	now      time.Time
}

// stragglerChanges are the findings to store (put) and to delete.
type stragglerChanges struct {
	put   map[string]record.Straggler
	clear []string
}

func (c stragglerChanges) empty() bool { return len(c.put) == 0 && len(c.clear) == 0 }

// observe looks at v and returns what changes; apply records them once
// stored. It names nobody while a resize is in flight: a ring that is
// re-forming, draining or waiting for joins computes at no steady pace.
func (s *stragglers) observe(v stragglerView) stragglerChanges {
	var ch stragglerChanges
	g := v.gen
	for id := range s.named {
		if g == nil || !inRing(g, id) {
			ch.clear = append(ch.clear, id) // it left: its finding has done its work
		}
	}
	if g == nil || g.Paused || g.Stop != nil {
		clear(s.tracks)
		return ch
	}
	if g.Number != s.gen {
		s.gen = g.Number
		clear(s.tracks) // new ranks, new neighbours: the old runs say nothing
	}
	if v.resizing || !steady(v) {
		for _, t := range s.tracks {
			t.slowFrom, t.fastFrom = 0, 0
		}
		return ch
	}
	var computes []float64
	for _, m := range g.Members {
		if st := v.statuses[m.ID]; st.ComputeTimeS > 0 {
			computes = append(computes, st.ComputeTimeS)
		}
	}
	if len(computes) < minStragglerPeers {
		return ch
	}
	median := quantile.Of(computes, 0.5)
	var due []string
	for _, m := range g.Members {
		st := v.statuses[m.ID]
		t := s.tracks[m.ID]
		if t == nil {
			t = &stragglerTrack{}
			s.tracks[m.ID] = t
		}
		if st.ComputeTimeS <= 0 || st.Step <= t.last {
			continue // nothing new measured
		}
		// A status covers the steps since the one before it.
		from := st.Step
		if t.last > 0 {
			from = t.last + 1
		}
		t.last = st.Step
		ratio := st.ComputeTimeS / median
		_, named := s.named[m.ID]
		switch {
		case ratio > s.cfg.Factor:
			t.fastFrom = 0
			if t.slowFrom == 0 {
				t.slowFrom = from
			}
			if !named && st.Step-t.slowFrom+1 >= s.cfg.Window {
				due = append(due, m.ID)
			}
		case ratio < s.cfg.clearFactor():
			t.slowFrom = 0
			if named && t.fastFrom == 0 {
				t.fastFrom = from
			}
			if named && st.Step-t.fastFrom+1 >= s.cfg.Window {
				ch.clear = append(ch.clear, m.ID)
			}
		default: // the band: a run either way starts over
			t.slowFrom, t.fastFrom = 0, 0
		}
	}
	// The slowest first, up to the share of the ring allowed at once.
	slices.SortFunc(due, func(a, b string) int {
		return cmp.Compare(v.statuses[b].ComputeTimeS, v.statuses[a].ComputeTimeS)
	})
	room := s.cfg.allowed(len(g.Members)) - len(s.named) + len(ch.clear)
	for _, id := range due[:min(len(due), max(room, 0))] {
		if ch.put == nil {
			ch.put = map[string]record.Straggler{}
		}
		st := v.statuses[id]
		rm, _ := g.Member(id)
		action := s.cfg.Action
		if action == record.ActionReplace && g.WorldSize-rm.Slots < v.min {
			action = record.ActionReport // the job would pause without it
		}
		ch.put[id] = record.Straggler{
			Generation: g.Number, SinceStep: s.tracks[id].slowFrom, Step: st.Step,
			ComputeTimeS: st.ComputeTimeS, MedianComputeTimeS: median, Action: action,
			Node: v.members[id].Node, Leader: v.leader, Time: v.now,
		}
	}
	return ch
}

// apply records changes that were stored.
func (s *stragglers) apply(ch stragglerChanges) {
	for _, id := range ch.clear {
		delete(s.named, id)
		if t := s.tracks[id]; t != nil {
			t.slowFrom, t.fastFrom = 0, 0
		}
	}
	for id, f := range ch.put {
		s.named[id] = f
	}
}

// steady reports whether every ring member trains in the generation: it
// is registered and not draining, and its trainer reports steps of it.
func steady(v stragglerView) bool {
	for _, m := range v.gen.Members {
		info, ok := v.members[m.ID]
		if !ok || info.State == record.StateDraining || v.statuses[m.ID].Generation != v.gen.Number {
			return false
		}
	}
	return true
}

func inRing(g *record.Generation, id string) bool {
	_, ok := g.Member(id)
	return ok
}
