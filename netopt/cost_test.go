package netopt

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ringside/ringside/coordinator/record"
)

func TestRingLevelsCountsDomainsAndCrossEdges(t *testing.T) {
	tests := []struct {
		name  string
		order []record.MemberInfo
		want  []LevelStats
	}{
		{
			name:  "contiguous ring crosses each level once per domain",
			order: []record.MemberInfo{member("a", "z1", "r1"), member("b", "z1", "r1"), member("c", "z1", "r2"), member("d", "z2", "r3")},
			want:  []LevelStats{{Level: 0, Domains: 2, CrossEdges: 2}, {Level: 1, Domains: 3, CrossEdges: 3}},
		},
		{
			name:  "interleaved ring crosses at every edge",
			order: []record.MemberInfo{member("a", "z1", "r1"), member("d", "z2", "r3"), member("b", "z1", "r1"), member("e", "z2", "r3")},
			want:  []LevelStats{{Level: 0, Domains: 2, CrossEdges: 4}, {Level: 1, Domains: 2, CrossEdges: 4}},
		},
		{
			name:  "racks with the same name in different zones are different domains",
			order: []record.MemberInfo{member("a", "z1", "r1"), member("b", "z2", "r1")},
			want:  []LevelStats{{Level: 0, Domains: 2, CrossEdges: 2}, {Level: 1, Domains: 2, CrossEdges: 2}},
		},
		{
			name:  "one member has no edges",
			order: []record.MemberInfo{member("a", "z1")},
			want:  []LevelStats{{Level: 0, Domains: 1, CrossEdges: 0}},
		},
		{
			name:  "no topology has no levels",
			order: []record.MemberInfo{member("a"), member("b")},
			want:  []LevelStats{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, RingLevels(tt.order)); diff != "" {
				t.Errorf("levels (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllReduceFollowsTheAlphaBetaModel(t *testing.T) {
	m := CostModel{
		Bytes:          1e9,
		LocalBandwidth: 100e9,
		LocalLatency:   1e-6,
		Tiers:          []Tier{{Name: "host", Uplink: 10e9, Latency: 10e-6}, {Name: "rack", Uplink: 20e9, Latency: 100e-6}},
	}
	slots := func(mi record.MemberInfo, n int) record.MemberInfo { mi.Slots = n; return mi }
	tests := []struct {
		name       string
		order      []record.MemberInfo
		bandwidth  float64 // of the slowest edge
		latency    float64 // of the slowest edge
		ranks      int
		bottleneck string
	}{
		{
			name:      "one host with 8 ranks runs at NVLink speed",
			order:     []record.MemberInfo{slots(member("a", "r1", "h1"), 8)},
			bandwidth: 100e9, latency: 1e-6, ranks: 8, bottleneck: "a (inside)",
		},
		{
			name:      "two hosts of one rack are paced by the host uplink",
			order:     []record.MemberInfo{member("a", "r1", "h1"), member("b", "r1", "h2")},
			bandwidth: 10e9, latency: 10e-6, ranks: 2, bottleneck: "a -> b",
		},
		{
			name:      "contiguous racks: one edge leaves each rack, host uplinks pace the ring",
			order:     []record.MemberInfo{member("a", "r1", "h1"), member("b", "r1", "h2"), member("c", "r2", "h3"), member("d", "r2", "h4")},
			bandwidth: 10e9, latency: 100e-6, ranks: 4, bottleneck: "a -> b",
		},
		{
			name:      "interleaved racks: four edges share each rack uplink",
			order:     []record.MemberInfo{member("a", "r1", "h1"), member("c", "r2", "h3"), member("b", "r1", "h2"), member("d", "r2", "h4"), member("e", "r1", "h5"), member("f", "r2", "h6"), member("g", "r1", "h7"), member("h", "r2", "h8")},
			bandwidth: 5e9, latency: 100e-6, ranks: 8, bottleneck: "a -> c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := m.AllReduce(tt.order)
			n := float64(tt.ranks)
			want := Estimate{
				BandwidthSeconds: 2 * (n - 1) / n * m.Bytes / tt.bandwidth,
				LatencySeconds:   2 * (n - 1) * tt.latency,
				Ranks:            tt.ranks,
				MinBandwidth:     tt.bandwidth,
				MaxLatency:       tt.latency,
				Bottleneck:       tt.bottleneck,
			}
			want.Seconds = want.BandwidthSeconds + want.LatencySeconds
			if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(math.Abs(x), math.Abs(y)) })); diff != "" {
				t.Errorf("estimate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllReduceOfPlannedRingBeatsShuffledOrder(t *testing.T) {
	cluster, err := GenerateCluster(ClusterSpec{Members: 512, Levels: 3, Fanout: 8, Slots: 8}, newRand(7))
	if err != nil {
		t.Fatal(err)
	}
	given := Members(cluster)
	planned := NewOrderer().Order(nil, given)
	m := DefaultCostModel()
	if p, g := m.AllReduce(planned), m.AllReduce(given); !(p.Seconds < g.Seconds) || !(p.MinBandwidth > g.MinBandwidth) {
		t.Errorf("planned %+v is not faster than given %+v", p, g)
	}
}

func TestCostModelValidateNamesTheBadField(t *testing.T) {
	m := DefaultCostModel()
	m.Bytes = 0
	m.Tiers[1].Uplink = -1
	err := m.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	want := "cost model: bytes must be positive, got 0\ncost model: tier 1 (rack): uplink must be positive and latency not negative, got -1 B/s, 8e-06 s"
	if err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("default config is invalid: %v", err)
	}
}
