package coordinator

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/testbin"
)

func members(specs ...string) map[string]record.MemberInfo {
	out := make(map[string]record.MemberInfo)
	for i, s := range specs {
		var id string
		slots := 1
		state := record.StateActive
		fmt.Sscanf(s, "%s", &id)
		if n, _ := fmt.Sscanf(s, "%s %d", &id, &slots); n < 2 {
			slots = 1
		}
		switch id[0] {
		case '~':
			id, state = id[1:], record.StateDraining
		case '?':
			id, state = id[1:], record.StatePending
		}
		out[id] = record.MemberInfo{ID: id, Addr: id + ".addr", Slots: slots, State: state, JoinRevision: int64(i + 1)}
	}
	return out
}

func TestPlan(t *testing.T) {
	prev := func(ids ...string) *record.Generation {
		g := &record.Generation{Number: 7}
		for i, id := range ids {
			g.Members = append(g.Members, record.RankedMember{ID: id, Addr: id + ".addr", Rank: i, Slots: 1})
		}
		g.WorldSize = len(ids)
		return g
	}
	tests := []struct {
		name        string
		policy      Policy
		prev        *record.Generation
		floor       int64
		members     map[string]record.MemberInfo
		wantNum     int64 // 0: prev's number + 1
		wantIDs     []string
		wantStandby []string
		wantPaused  bool
		wantNil     bool
		wantUrgent  bool
		wantReason  string
	}{
		{name: "first generation takes every member in join order",
			policy: Policy{Min: 1, Unit: 1}, members: members("a", "b", "c"),
			wantIDs: []string{"a", "b", "c"}},
		{name: "no change plans nothing",
			policy: Policy{Min: 1, Unit: 1}, prev: prev("a", "b"), members: members("a", "b"),
			wantNil: true},
		{name: "a departure is urgent and survivors keep their order",
			policy: Policy{Min: 1, Unit: 1}, prev: prev("c", "a", "b"), members: members("a", "c"),
			wantIDs: []string{"c", "a"}, wantUrgent: true},
		{name: "max leaves the latest joiners standby",
			policy: Policy{Min: 1, Max: 2, Unit: 1}, members: members("a", "b", "c"),
			wantIDs: []string{"a", "b"}, wantStandby: []string{"c"}},
		{name: "unit trims to a multiple, newest first",
			policy: Policy{Min: 1, Unit: 2}, members: members("a", "b", "c"),
			wantIDs: []string{"a", "b"}, wantStandby: []string{"c"}},
		{name: "slots count toward max and unit",
			policy: Policy{Min: 1, Max: 8, Unit: 4}, members: members("a 4", "b 2", "c 2", "d 4"),
			wantIDs: []string{"a", "b", "c"}, wantStandby: []string{"d"}},
		{name: "below min the generation is paused",
			policy: Policy{Min: 3, Unit: 1}, members: members("a", "b"),
			wantIDs: []string{"a", "b"}, wantPaused: true},
		{name: "draining members are excluded at once",
			policy: Policy{Min: 1, Unit: 1}, prev: prev("a", "b", "c"), members: members("a", "~b", "c"),
			wantIDs: []string{"a", "c"}, wantUrgent: true, wantReason: "drain b"},
		{name: "a member whose trainer went away (pending) leaves at once",
			policy: Policy{Min: 1, Unit: 1}, prev: prev("a", "b", "c"), members: members("a", "?b", "c"),
			wantIDs: []string{"a", "c"}, wantUrgent: true, wantReason: "trainer gone b"},
		{name: "a pending member that comes back active joins with the settle window",
			policy: Policy{Min: 1, Unit: 1}, prev: prev("a", "c"), members: members("a", "b", "c"),
			wantIDs: []string{"a", "c", "b"}, wantReason: "join b"},
		{name: "standby is promoted when a member leaves",
			policy:  Policy{Min: 1, Max: 2, Unit: 1},
			prev:    &record.Generation{Number: 3, Members: []record.RankedMember{{ID: "b", Addr: "b.addr", Slots: 1}, {ID: "a", Addr: "a.addr", Rank: 1, Slots: 1}}, Standby: []string{"c"}, WorldSize: 2},
			members: members("a", "c", "d"),
			wantIDs: []string{"a", "c"}, wantStandby: []string{"d"}, wantUrgent: true},
		{name: "a lost generation key numbers above the floor, from nothing",
			policy: Policy{Min: 1, Unit: 1}, floor: 41, members: members("a", "b"),
			wantNum: 42, wantIDs: []string{"a", "b"}},
		{name: "a floor above prev's number wins and the ring still builds on prev",
			policy: Policy{Min: 1, Unit: 1}, prev: prev("b", "a"), floor: 20, members: members("a", "b", "c"),
			wantNum: 21, wantIDs: []string{"b", "a", "c"}},
		{name: "a floor below prev's number changes nothing",
			policy: Policy{Min: 1, Unit: 1}, prev: prev("a", "b"), floor: 3, members: members("a"),
			wantNum: 8, wantIDs: []string{"a"}, wantUrgent: true},
		{name: "a floor alone does not commit an empty ring",
			policy: Policy{Min: 1, Unit: 1}, floor: 9, members: members(),
			wantNil: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig("ns", "job")
			cfg.Policy = tt.policy
			next, d := cfg.plan(tt.prev, tt.floor, tt.members)
			if tt.wantNil {
				if next != nil {
					t.Fatalf("planned %v, want no change", next.IDs())
				}
				return
			}
			if next == nil {
				t.Fatal("planned nothing")
			}
			wantNum := tt.wantNum
			if wantNum == 0 && tt.prev != nil {
				wantNum = tt.prev.Number + 1
			} else if wantNum == 0 {
				wantNum = 1
			}
			if next.Number != wantNum {
				t.Errorf("number %d, want %d", next.Number, wantNum)
			}
			if diff := cmp.Diff(tt.wantIDs, next.IDs()); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStandby, next.Standby); diff != "" {
				t.Errorf("standby (-want +got):\n%s", diff)
			}
			if next.Paused != tt.wantPaused {
				t.Errorf("paused = %v, want %v", next.Paused, tt.wantPaused)
			}
			if d.urgent() != tt.wantUrgent && tt.prev != nil {
				t.Errorf("urgent = %v, want %v (%s)", d.urgent(), tt.wantUrgent, d)
			}
			if tt.wantReason != "" && d.String() != tt.wantReason {
				t.Errorf("reason = %q, want %q", d, tt.wantReason)
			}
			if err := next.Validate(); err != nil {
				t.Errorf("planned generation is invalid: %v", err)
			}
			if next.MasterAddr != next.Members[0].Addr {
				t.Errorf("master %q is not rank 0's address %q", next.MasterAddr, next.Members[0].Addr)
			}
		})
	}
}

func TestPlanWithoutOrdererAppendsNewcomersInJoinOrder(t *testing.T) {
	cfg := DefaultConfig("ns", "job")
	prev := &record.Generation{Number: 4, WorldSize: 2, Members: []record.RankedMember{
		{ID: "b", Addr: "b.addr", Rank: 0, Slots: 1}, {ID: "a", Addr: "a.addr", Rank: 1, Slots: 1}}}
	ms := members("a", "b", "d", "c")
	// The topology is ignored: without an orderer, d does not move next
	// to a although they share a rack.
	for id, topo := range map[string][]string{"a": {"z1", "r1"}, "b": {"z2"}, "c": {"z2"}, "d": {"z1", "r1"}} {
		m := ms[id]
		m.Topology = topo
		ms[id] = m
	}
	next, _ := cfg.plan(prev, 0, ms)
	if diff := cmp.Diff([]string{"b", "a", "d", "c"}, next.IDs()); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

// reverseOrderer keeps the contract: newcomers reversed, in front of the
// survivors in their order.
type reverseOrderer struct{}

func (reverseOrderer) Order(s, n []record.MemberInfo) []record.MemberInfo {
	out := slices.Clone(n)
	slices.Reverse(out)
	return append(out, s...)
}

func TestPlanTakesTheOrderersRing(t *testing.T) {
	cfg := DefaultConfig("ns", "job")
	cfg.Orderer = reverseOrderer{}
	prev, _ := cfg.plan(nil, 0, members("a", "b"))
	next, _ := cfg.plan(prev, 0, members("a", "b", "c", "d"))
	if diff := cmp.Diff([]string{"d", "c", "b", "a"}, next.IDs()); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

type brokenOrderer struct{}

func (brokenOrderer) Order(s, n []record.MemberInfo) []record.MemberInfo { return n }

func TestPlanFallsBackWhenOrdererBreaksContract(t *testing.T) {
	cfg := DefaultConfig("ns", "job")
	cfg.Orderer = brokenOrderer{}
	rec := &testbin.Buffer{}
	cfg.Logger = warnLogger(rec)
	prev, _ := cfg.plan(nil, 0, members("a", "b"))
	next, _ := cfg.plan(prev, 0, members("a", "b", "c"))
	if diff := cmp.Diff([]string{"a", "b", "c"}, next.IDs()); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
	if rec.String() == "" {
		t.Fatal("a broken orderer was not reported")
	}
}

// TestPlanKeepsRanksStable drives random joins, leaves and drains through
// plan and checks that survivors always keep their relative order and that
// every generation is well formed and within the policy.
func TestPlanKeepsRanksStable(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig("ns", "job")
		cfg.Policy = Policy{Min: 1, Max: rapid.IntRange(0, 12).Draw(t, "max"), Unit: rapid.IntRange(1, 3).Draw(t, "unit")}
		if cfg.Policy.Max != 0 && cfg.Policy.Max < cfg.Policy.Unit {
			cfg.Policy.Max = cfg.Policy.Unit
		}
		live := map[string]record.MemberInfo{}
		var gen *record.Generation
		next := 0
		for step := range rapid.IntRange(1, 40).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("op%d", step)); {
			case op == 0 || len(live) == 0:
				id := fmt.Sprintf("m%d", next)
				next++
				live[id] = record.MemberInfo{ID: id, Addr: id, Slots: rapid.IntRange(1, 2).Draw(t, "slots"), State: record.StateActive,
					JoinRevision: int64(next), Topology: []string{rapid.SampledFrom([]string{"z1", "z2", "z3"}).Draw(t, "zone")}}
			default:
				keys := slices.Sorted(func(yield func(string) bool) {
					for k := range live {
						if !yield(k) {
							return
						}
					}
				})
				id := rapid.SampledFrom(keys).Draw(t, "victim")
				if op == 1 {
					delete(live, id)
				} else {
					m := live[id]
					m.State = record.StateDraining
					live[id] = m
				}
			}
			planned, _ := cfg.plan(gen, 0, live)
			if planned == nil {
				continue
			}
			if err := planned.Validate(); err != nil {
				t.Fatalf("invalid generation: %v", err)
			}
			if planned.WorldSize%cfg.Policy.Unit != 0 || (cfg.Policy.Max > 0 && planned.WorldSize > cfg.Policy.Max) {
				t.Fatalf("world size %d breaks policy %+v", planned.WorldSize, cfg.Policy)
			}
			if gen != nil {
				var kept []string
				for _, id := range gen.IDs() {
					if _, ok := planned.Member(id); ok {
						kept = append(kept, id)
					}
				}
				var order []string
				for _, id := range planned.IDs() {
					if _, ok := gen.Member(id); ok {
						order = append(order, id)
					}
				}
				if !slices.Equal(kept, order) {
					t.Fatalf("survivors reordered: was %v, now %v", kept, order)
				}
			}
			gen = planned
		}
	})
}
