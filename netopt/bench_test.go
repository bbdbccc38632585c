package netopt

import (
	"math/rand/v2"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// BenchmarkPlan4096 plans a fresh ring of 4,096 members given in shuffled
// order (the `netopt plan` target: well under 50 ms).
func BenchmarkPlan4096(b *testing.B) {
	for _, levels := range []int{2, 4} {
		cluster, err := GenerateCluster(ClusterSpec{Members: 4096, Levels: levels, Fanout: 8, Slots: 8}, newRand(1))
		if err != nil {
			b.Fatal(err)
		}
		members := Members(cluster)
		b.Run(map[int]string{2: "levels=2", 4: "levels=4"}[levels], func(b *testing.B) {
			o := NewOrderer()
			for b.Loop() {
				o.Order(nil, members)
			}
		})
	}
}

// BenchmarkChurn4096 replaces a quarter of a planned 4,096-member ring.
func BenchmarkChurn4096(b *testing.B) {
	cluster, err := GenerateCluster(ClusterSpec{Members: 4096, Levels: 4, Fanout: 8, Slots: 8}, newRand(1))
	if err != nil {
		b.Fatal(err)
	}
	o := NewOrderer()
	ring := o.Order(nil, Members(cluster))
	survivors, newcomers := ring[:3072], ring[3072:]
	for b.Loop() {
		o.Order(survivors, newcomers)
	}
}

// BenchmarkChurnScattered4096 adds 1,024 newcomers to 3,072 survivors whose
// order was not made by Orderer (shuffled): the gap-search path.
func BenchmarkChurnScattered4096(b *testing.B) {
	cluster, err := GenerateCluster(ClusterSpec{Members: 4096, Levels: 4, Fanout: 8, Slots: 8}, newRand(1))
	if err != nil {
		b.Fatal(err)
	}
	members := Members(cluster)
	survivors, newcomers := members[:3072], members[3072:]
	o := NewOrderer()
	for b.Loop() {
		o.Order(survivors, newcomers)
	}
}
