package chaos

import (
	"strings"
	"testing"
	"time"
)

// t0 is the start of every hand-made history.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// goodHistory is a correct run: three workers train at generation 3, w2 is
// killed, the survivors commit and see generation 4 and train on from the
// step after the last one they completed.
func goodHistory() History {
	h := History{Start: t0, End: at(30), Min: 1, Workers: map[string]*Life{
		"w0": {ID: "w0", Started: at(0)},
		"w1": {ID: "w1", Started: at(0)},
		"w2": {ID: "w2", Started: at(0), SidecarGone: at(10), TrainerGone: at(10)},
	}}
	ring := []string{"w0", "w1", "w2"}
	h.Commits = []Commit{
		{Number: 1, Members: ring[:1], Leader: "w0", Term: "w0", Revision: 10, Observed: at(1)},
		{Number: 2, Members: ring[:2], Leader: "w0", Term: "w0", Revision: 12, Observed: at(1.5)},
		{Number: 3, Members: ring, Leader: "w0", Term: "w0", Revision: 14, Observed: at(2)},
		{Number: 4, Members: ring[:2], Leader: "w0", Term: "w0", Revision: 20, Observed: at(11)},
	}
	for _, g := range h.Commits {
		for _, id := range g.Members {
			h.Deliveries = append(h.Deliveries, Delivery{Worker: id, Number: g.Number, Members: g.Members,
				Sent: g.Observed.Add(-time.Millisecond), Received: g.Observed.Add(2 * time.Millisecond)})
		}
	}
	h.Deliveries = append(h.Deliveries, Delivery{Worker: "w2", Number: 3, Members: ring, Sent: at(2), Received: at(2)})
	for i := int64(1); i <= 80; i++ { // steps 1-80 at world 3 from 2 s to 10 s
		for _, id := range ring {
			h.Steps = append(h.Steps, Step{Worker: id, Step: i, Generation: 3, World: 3, At: at(2 + float64(i)/10)})
		}
	}
	for i := int64(81); i <= 250; i++ { // then at world 2 from 12 s on
		for _, id := range ring[:2] {
			h.Steps = append(h.Steps, Step{Worker: id, Step: i, Generation: 4, World: 2, At: at(12 + float64(i-81)/10)})
		}
	}
	h.Registrations = []Registration{{Member: "w2", Lease: 0x2, Revision: 5, At: at(0)}}
	h.Evictions = []Eviction{{Member: "w2", Lease: 0x2, Revision: 19, At: at(10.8)}}
	h.Faults = []Fault{{Kind: KillWorker, Targets: []string{"w2"}, At: at(10), Resumed: at(12.1)}}
	return h
}

func TestCheckFindsEachViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *History)
		want   string // the violation the checker must name; "" for none
	}{
		{"a correct history passes", func(*History) {}, ""},
		{"a second generation under one number fails", func(h *History) {
			h.Commits = append(h.Commits, Commit{Number: 4, Members: []string{"w1", "w0"}, Leader: "w0", Term: "w0", Revision: 22, Observed: at(12)})
		}, "duplicate_generation"},
		{"numbers going down fail", func(h *History) {
			h.Commits = append(h.Commits, Commit{Number: 2, Members: []string{"w0"}, Leader: "w0", Term: "w0", Revision: 22, Observed: at(12)})
		}, "decreasing_generation"},
		{"a delivered generation that was never committed fails", func(h *History) {
			h.Deliveries = append(h.Deliveries, Delivery{Worker: "w1", Number: 5, Members: []string{"w1"}, Sent: at(13), Received: at(13)})
		}, "not_linearizable"},
		{"a delivery with other members than the commit fails", func(h *History) {
			h.Deliveries[len(h.Deliveries)-2].Members = []string{"w1", "w0"}
		}, "not_linearizable"},
		{"a commit by a member that did not lead is split brain", func(h *History) {
			h.Commits[3].Leader = "w1"
		}, "split_brain"},
		{"revoking a running sidecar's registration is a live eviction", func(h *History) {
			h.Registrations = append(h.Registrations, Registration{Member: "w1", Lease: 0x1, Revision: 4, At: at(0)})
			h.Evictions = append(h.Evictions, Eviction{Member: "w1", Lease: 0x1, Revision: 25, At: at(20)})
		}, "live_eviction"},
		{"a replaced registration's revocation is no eviction", func(h *History) {
			h.Registrations = append(h.Registrations, Registration{Member: "w1", Lease: 0x1, Revision: 4, At: at(0)},
				Registration{Member: "w1", Lease: 0x7, Revision: 24, At: at(19)})
			h.Evictions = append(h.Evictions, Eviction{Member: "w1", Lease: 0x1, Revision: 25, At: at(20)})
		}, ""},
		{"etcd expiring a lease its freeze outlived is no eviction", func(h *History) {
			h.Registrations = append(h.Registrations, Registration{Member: "w1", Lease: 0x1, Revision: 4, At: at(0)})
			h.EtcdDown = append(h.EtcdDown, Interval{From: at(16), To: at(19.5)})
			h.Evictions = append(h.Evictions, Eviction{Member: "w1", Lease: 0x1, Revision: 25, At: at(20)})
		}, ""},
		{"an eviction by the protocol right after an outage is a live eviction", func(h *History) {
			h.Registrations = append(h.Registrations, Registration{Member: "w1", Lease: 0x1, Revision: 4, At: at(0)})
			h.EtcdDown = append(h.EtcdDown, Interval{From: at(16), To: at(19.5)})
			h.Evictions = append(h.Evictions, Eviction{Member: "w1", Lease: 0x1, Revision: 25, At: at(20), Recorded: true})
		}, "live_eviction"},
		{"a generation that changes nothing is spurious", func(h *History) {
			h.Commits = append(h.Commits, Commit{Number: 5, Members: []string{"w0", "w1"}, Leader: "w0", Term: "w0", Revision: 30, Observed: at(25)})
			for _, id := range []string{"w0", "w1"} {
				h.Deliveries = append(h.Deliveries, Delivery{Worker: id, Number: 5, Members: []string{"w0", "w1"}, Sent: at(25), Received: at(25)})
			}
		}, "spurious_generation"},
		{"leaving out an untouched member is spurious", func(h *History) {
			h.Commits[3].Members = []string{"w0"}
		}, "spurious_generation"},
		{"a step counter that goes back loses steps", func(h *History) {
			for i := range h.Steps {
				if h.Steps[i].Generation == 4 {
					h.Steps[i].Step -= 5
				}
			}
		}, "lost_committed_steps"},
		{"a stall while workers run is a deadlock", func(h *History) {
			h.End = at(60)
		}, "deadlock"},
		{"members that disagree too long diverge", func(h *History) {
			h.Deliveries = h.Deliveries[:len(h.Deliveries)-3] // w0 and w1 never see generation 4
			h.Deliveries = append(h.Deliveries, Delivery{Worker: "w0", Number: 4, Members: []string{"w0", "w1"}, Sent: at(11), Received: at(11)})
		}, "divergence"},
		{"a live member left on an old generation is unsynced", func(h *History) {
			var kept []Delivery
			for _, d := range h.Deliveries {
				if d.Worker != "w1" || d.Number != 4 {
					kept = append(kept, d)
				}
			}
			h.Deliveries = kept
		}, "unsynced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := goodHistory()
			tc.change(&h)
			r := Check(h, DefaultCheckConfig())
			if tc.want == "" {
				if !r.OK() {
					t.Fatalf("violations in a correct history:\n%s", strings.Join(r.Violations, "\n"))
				}
				return
			}
			for _, v := range r.Violations {
				if strings.HasPrefix(v, tc.want+" ") {
					return
				}
			}
			t.Fatalf("want a %s violation, got:\n%s", tc.want, strings.Join(r.Violations, "\n"))
		})
	}
}

func TestCheckMeasuresResumeFromTheFault(t *testing.T) {
	r := Check(goodHistory(), DefaultCheckConfig())
	if len(r.ResumeS) != 1 || r.ResumeS[0] < 2.09 || r.ResumeS[0] > 2.11 {
		t.Fatalf("resume times %v, want [2.1]", r.ResumeS)
	}
	if !r.Linearizable {
		t.Fatal("a correct history is not linearizable")
	}
}

func TestCheckCountsViolationsByTheFaultBefore(t *testing.T) {
	h := goodHistory()
	h.Commits = append(h.Commits, Commit{Number: 4, Members: []string{"w0", "w1"}, Leader: "w0", Term: "w0", Revision: 22, Observed: at(12)})
	r := Check(h, DefaultCheckConfig())
	if r.ByKind[KillWorker]["duplicate_generation"] != 1 {
		t.Fatalf("by kind %v, want one duplicate_generation after kill", r.ByKind)
	}
}

func TestScheduleIsSeeded(t *testing.T) {
	a, b := Schedule(7, 20, AllKinds), Schedule(7, 20, AllKinds)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("event %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	if c := Schedule(8, 20, AllKinds); c[0] == a[0] && c[1] == a[1] {
		t.Fatal("seeds 7 and 8 drew the same schedule")
	}
}
