package netopt

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/ringside/ringside/coordinator/record"
)

func member(id string, topology ...string) record.MemberInfo {
	return record.MemberInfo{ID: id, Topology: topology, Slots: 1, State: record.StateActive}
}

func ids(ms []record.MemberInfo) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func TestOrderPlacesNewcomersNextToTheirClosestPeers(t *testing.T) {
	tests := []struct {
		name                 string
		survivors, newcomers []record.MemberInfo
		want                 []string
	}{
		{
			name:      "fresh plan groups by zone, then rack, in order of arrival",
			newcomers: []record.MemberInfo{member("a", "z2", "r3"), member("b", "z1", "r1"), member("c", "z2", "r4"), member("d", "z1", "r2"), member("e", "z1", "r1")},
			want:      []string{"a", "c", "b", "e", "d"},
		},
		{
			name:      "newcomer joins the end of its rack",
			survivors: []record.MemberInfo{member("a", "z1", "r1"), member("b", "z1", "r2"), member("c", "z2", "r3")},
			newcomers: []record.MemberInfo{member("d", "z1", "r1")},
			want:      []string{"a", "d", "b", "c"},
		},
		{
			name:      "newcomer in a new rack goes at the end of its zone",
			survivors: []record.MemberInfo{member("a", "z1", "r1"), member("b", "z1", "r2"), member("c", "z2", "r3")},
			newcomers: []record.MemberInfo{member("d", "z1", "r9")},
			want:      []string{"a", "b", "d", "c"},
		},
		{
			name:      "newcomer in a new zone goes at the end",
			survivors: []record.MemberInfo{member("a", "z1", "r1"), member("c", "z2", "r3")},
			newcomers: []record.MemberInfo{member("d", "z0", "r0")},
			want:      []string{"a", "c", "d"},
		},
		{
			name:      "survivors' order wins over sorting",
			survivors: []record.MemberInfo{member("c", "z2", "r3"), member("a", "z1", "r1")},
			newcomers: []record.MemberInfo{member("b", "z1", "r1"), member("d", "z2", "r3")},
			want:      []string{"c", "d", "a", "b"},
		},
		{
			name: "members on one node sit together even without a topology",
			newcomers: []record.MemberInfo{
				{ID: "a", Node: "n2", Slots: 1}, {ID: "b", Node: "n1", Slots: 1}, {ID: "c", Node: "n2", Slots: 1},
			},
			want: []string{"a", "c", "b"},
		},
		{
			name:      "scattered survivors keep their order and newcomers take the cheapest gap",
			survivors: []record.MemberInfo{member("a", "z1"), member("b", "z2"), member("c", "z1"), member("e", "z2")},
			newcomers: []record.MemberInfo{member("d", "z2")},
			want:      []string{"a", "d", "b", "c", "e"},
		},
		{
			// The ring closes (c -> a), so z1 stays one run; the members of
			// new or unknown domains take gaps that already cross zones.
			name:      "scattered survivors: newcomers of known and new domains add the fewest zone crossings",
			survivors: []record.MemberInfo{member("a", "z1", "r1"), member("b", "z2", "r1"), member("c", "z1", "r2")},
			newcomers: []record.MemberInfo{member("d", "z2", "r1"), member("e", "z3"), member("f", "z1", "r1"), member("g")},
			want:      []string{"a", "f", "g", "e", "d", "b", "c"},
		},
		{
			name:      "no topology at all keeps survivors then join order",
			survivors: []record.MemberInfo{member("b"), member("a")},
			newcomers: []record.MemberInfo{member("d"), member("c")},
			want:      []string{"b", "a", "d", "c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ids(NewOrderer().Order(tt.survivors, tt.newcomers))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

// genMembers draws n members with ids prefix0.. on a random tree of the
// given depth; ragged draws some shorter paths too.
func genMembers(t *rapid.T, prefix string, depth int, fanout []int, ragged bool) []record.MemberInfo {
	n := rapid.IntRange(0, 40).Draw(t, prefix+"n")
	out := make([]record.MemberInfo, n)
	for i := range out {
		d := depth
		if ragged {
			d = rapid.IntRange(0, depth).Draw(t, "depth")
		}
		topo := make([]string, d)
		for l := range topo {
			topo[l] = fmt.Sprintf("l%d-%d", l, rapid.IntRange(0, fanout[l]-1).Draw(t, "domain"))
		}
		out[i] = member(fmt.Sprintf("%s%d", prefix, i), topo...)
	}
	return out
}

func genTree(t *rapid.T) (int, []int) {
	depth := rapid.IntRange(1, 4).Draw(t, "levels")
	fanout := make([]int, depth)
	for l := range fanout {
		fanout[l] = rapid.IntRange(1, 4).Draw(t, "fanout")
	}
	return depth, fanout
}

// checkRing checks the RingOrderer contract: every member exactly once and
// survivors in their relative order.
func checkRing(t *rapid.T, survivors, newcomers, got []record.MemberInfo) {
	want := append(ids(survivors), ids(newcomers)...)
	slices.Sort(want)
	all := ids(got)
	slices.Sort(all)
	if !slices.Equal(want, all) {
		t.Fatalf("not every member exactly once: got %v, want %v", all, want)
	}
	keep := map[string]bool{}
	for _, m := range survivors {
		keep[m.ID] = true
	}
	var kept []string
	for _, m := range got {
		if keep[m.ID] {
			kept = append(kept, m.ID)
		}
	}
	if !slices.Equal(kept, ids(survivors)) {
		t.Fatalf("survivors reordered: %v, was %v", kept, ids(survivors))
	}
}

// checkContiguous checks that every domain of every level is one run of
// the ring: the cross edges of a level equal its domains (0 with one).
func checkContiguous(t *rapid.T, got []record.MemberInfo) {
	for _, l := range RingLevels(got) {
		want := l.Domains
		if l.Domains == 1 {
			want = 0
		}
		if l.CrossEdges != want {
			t.Fatalf("level %d: %d cross edges for %d domains in %v", l.Level, l.CrossEdges, l.Domains, got)
		}
	}
}

func TestOrderFreshPlanMakesEveryDomainContiguous(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		depth, fanout := genTree(t)
		ms := genMembers(t, "m", depth, fanout, rapid.Bool().Draw(t, "ragged"))
		got := NewOrderer().Order(nil, ms)
		checkRing(t, nil, ms, got)
		checkContiguous(t, got)
	})
}

func TestOrderKeepsSurvivorsAndContiguityThroughChurn(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		depth, fanout := genTree(t)
		ragged := rapid.Bool().Draw(t, "ragged")
		o := NewOrderer()
		ring := o.Order(nil, genMembers(t, "g0-", depth, fanout, ragged))
		for gen := 1; gen <= 4; gen++ {
			var survivors []record.MemberInfo
			for _, m := range ring {
				if !rapid.Bool().Draw(t, "leaves") {
					survivors = append(survivors, m)
				}
			}
			newcomers := genMembers(t, fmt.Sprintf("g%d-", gen), depth, fanout, ragged)
			ring = o.Order(survivors, newcomers)
			checkRing(t, survivors, newcomers, ring)
			checkContiguous(t, ring)
		}
	})
}

func TestOrderKeepsScatteredSurvivorsInOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		depth, fanout := genTree(t)
		survivors := rapid.Permutation(genMembers(t, "s", depth, fanout, false)).Draw(t, "survivors")
		newcomers := genMembers(t, "n", depth, fanout, false)
		checkRing(t, survivors, newcomers, NewOrderer().Order(survivors, newcomers))
	})
}

func TestOrderKeepsARotatedRingContiguous(t *testing.T) {
	// A ring that is contiguous only around its closing edge (not made by
	// Orderer) goes through the gap search, which must keep it contiguous
	// when newcomers join domains that exist.
	rapid.Check(t, func(t *rapid.T) {
		depth, fanout := genTree(t)
		fresh := NewOrderer().Order(nil, genMembers(t, "s", depth, fanout, false))
		if len(fresh) == 0 {
			return
		}
		k := rapid.IntRange(0, len(fresh)-1).Draw(t, "rotation")
		survivors := append(slices.Clone(fresh[k:]), fresh[:k]...)
		var newcomers []record.MemberInfo
		for i := range rapid.IntRange(0, 10).Draw(t, "newcomers") {
			peer := survivors[rapid.IntRange(0, len(survivors)-1).Draw(t, "peer")]
			keep := rapid.IntRange(0, depth).Draw(t, "shared levels")
			topo := slices.Clone(peer.Topology[:keep])
			for l := keep; l < depth; l++ {
				topo = append(topo, fmt.Sprintf("new%d-%d", l, i))
			}
			newcomers = append(newcomers, member(fmt.Sprintf("n%d", i), topo...))
		}
		got := NewOrderer().Order(survivors, newcomers)
		checkRing(t, survivors, newcomers, got)
		checkContiguous(t, got)
	})
}

func TestOrderPlans4096MembersOptimally(t *testing.T) {
	for _, levels := range []int{2, 4} {
		cluster, err := GenerateCluster(ClusterSpec{Members: 4096, Levels: levels, Fanout: 8, Slots: 8}, newRand(1))
		if err != nil {
			t.Fatal(err)
		}
		got := NewOrderer().Order(nil, Members(cluster))
		for _, l := range RingLevels(got) {
			if l.Domains > 1 && l.CrossEdges != l.Domains {
				t.Errorf("%d levels, level %d: %d cross edges for %d domains", levels, l.Level, l.CrossEdges, l.Domains)
			}
		}
	}
}
