package coordinator

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar/quantile"
)

// minStragglerPeers is the fewest members reporting compute times that
// the leader compares: of two, neither is the job's pace.
const minStragglerPeers = 3

// stragglerQuorum is the share of a window's steps a member must be slow
// in to be named (and back at pace in to be cleared): the steps a whole
// machine stalls, which slow every member alike, or a garbage collection
// do not start the count over.
const stragglerQuorum = 0.8

// stragglerTrack is what the leader follows of one ring member: its
// statuses over the last Window steps.
type stragglerTrack struct {
	last  int64 // the step of its newest status looked at
	spans []stragglerSpan
}

// stragglerSpan is one status: the steps from..to it covers and the
// member's compute time over the ring's median in them.
type stragglerSpan struct {
	from, to int64
	ratio    float64
}

// add records a status and drops what fell out of the window ending at
// its step.
func (t *stragglerTrack) add(sp stragglerSpan, window int64) {
	t.last = sp.to
	t.spans = append(t.spans, sp)
	start := sp.to - window + 1
	i := 0
	for i < len(t.spans) && t.spans[i].to < start {
		i++
	}
	t.spans = t.spans[i:]
}

// count returns how many of the window's steps (ending at t.last) were
// observed, and in how many the ratio satisfied in; first is the first
// step of the earliest span that did.
func (t *stragglerTrack) count(window int64, in func(float64) bool) (observed, matched, first int64) {
	start := t.last - window + 1
	for _, sp := range t.spans {
		n := sp.to - max(sp.from, start) + 1
		observed += n
		if in(sp.ratio) {
			matched += n
			if first == 0 {
				first = max(sp.from, start)
			}
		}
	}
	return observed, matched, first
}

// stragglers finds the ring's stragglers from the members' statuses: a
// member whose compute time per step was above Factor times the ring's
// median in most (stragglerQuorum) of the last Window steps is named; a
// named one whose compute time was below the clearing threshold (halfway
// between the median and Factor times it) in most of the last Window
// steps is cleared. The band between the two thresholds keeps a member
// near the factor from being named and cleared in turn.
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
		clear(s.tracks) // the window starts over once the ring is steady
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
	window, quorum := s.cfg.Window, int64(math.Ceil(stragglerQuorum*float64(s.cfg.Window)))
	slow := func(r float64) bool { return r > s.cfg.Factor }
	fast := func(r float64) bool { return r < s.cfg.clearFactor() }
	var due []string
	since := map[string]int64{}
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
		t.add(stragglerSpan{from: from, to: st.Step, ratio: st.ComputeTimeS / median}, window)
		_, named := s.named[m.ID]
		if !named {
			if observed, n, first := t.count(window, slow); observed >= window && n >= quorum {
				due, since[m.ID] = append(due, m.ID), first
			}
		} else if observed, n, _ := t.count(window, fast); observed >= window && n >= quorum {
			ch.clear = append(ch.clear, m.ID)
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
		replaceable := g.WorldSize-rm.Slots >= v.min
		action := s.cfg.Action
		if !replaceable {
			action = record.ActionReport // the job would pause without it
		}
		ch.put[id] = record.Straggler{
			Generation: g.Number, SinceStep: since[id], Step: st.Step,
			ComputeTimeS: st.ComputeTimeS, MedianComputeTimeS: median, Action: action, Replaceable: replaceable,
			Node: v.members[id].Node, Leader: v.leader, Time: v.now,
		}
	}
	return ch
}

// apply records changes that were stored.
func (s *stragglers) apply(ch stragglerChanges) {
	for _, id := range ch.clear {
		delete(s.named, id)
		delete(s.tracks, id) // a new window, to be named again
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
