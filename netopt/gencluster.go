package netopt

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// ClusterSpec describes a generated cluster.
type ClusterSpec struct {
	// Members is the number of members; each is one host.
	Members int
	// Levels is the topology depth; the narrowest level is the host, the
	// ones above are rack, block, zone, region, then tier5, tier6...
	Levels int
	// Fanout is how many domains of one level each domain of the level
	// above holds (hosts per rack, racks per block, ...); the broadest
	// level takes whatever remains.
	Fanout int
	// Slots is every member's number of ranks.
	Slots int
}

var levelNames = []string{"host", "rack", "block", "zone", "region"}

// GenerateCluster builds a cluster as spec says, in an order shuffled by
// rng, for benchmarking planners against the order members happen to
// arrive in.
func GenerateCluster(spec ClusterSpec, rng *rand.Rand) ([]ClusterMember, error) {
	var errs []error
	for _, f := range []struct {
		what     string
		got, min int
	}{
		{"members", spec.Members, 1},
		{"levels", spec.Levels, 1},
		{"fanout", spec.Fanout, 2},
		{"slots", spec.Slots, 1},
	} {
		if f.got < f.min {
			errs = append(errs, fmt.Errorf("%s must be at least %d, got %d", f.what, f.min, f.got))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]ClusterMember, spec.Members)
	for i := range out {
		topo := make([]string, spec.Levels)
		idx := i
		for l := spec.Levels - 1; l >= 0; l-- {
			u := spec.Levels - 1 - l // 0 = host
			name := fmt.Sprintf("tier%d", u)
			if u < len(levelNames) {
				name = levelNames[u]
			}
			topo[l] = fmt.Sprintf("%s-%d", name, idx)
			if l > 0 {
				idx /= spec.Fanout
			}
		}
		out[i] = ClusterMember{ID: fmt.Sprintf("w%d", i), Topology: topo, Slots: spec.Slots}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}
