package netopt

import (
	"errors"
	"fmt"
	"math"

	"github.com/ringside/ringside/coordinator/record"
)

// Tier describes the domains of one topology level for the cost model,
// counted from the narrowest level of the topology (tier 0, usually the
// host) outwards.
type Tier struct {
	Name string `json:"name"`
	// Uplink is the bandwidth in bytes/s one domain of this tier has to the
	// rest of the network. Every ring edge that leaves the domain shares it:
	// a contiguous domain is left by one edge, a scattered one by many.
	Uplink float64 `json:"uplink_bytes_per_s"`
	// Latency is the one-way latency in seconds of a message that leaves a
	// domain of this tier (up to its parent and back down).
	Latency float64 `json:"latency_s"`
}

// CostModel is the alpha-beta model of a ring all-reduce. A ring of N
// ranks takes 2(N-1) steps, each moving Bytes/N over every edge at once, so
// the slowest edge paces the ring:
//
//	time = 2(N-1)/N * Bytes / min_bw + 2(N-1) * max_latency
//
// where min_bw and max_latency run over the ring's edges. An edge between
// two members leaves the domains of every level they do not share; its
// bandwidth is the smallest share of those domains' uplinks (uplink / the
// number of ring edges leaving that domain). Ranks of one member, and
// members on the same innermost domain, talk at LocalBandwidth.
type CostModel struct {
	// Bytes is the size of the all-reduced buffer.
	Bytes float64 `json:"bytes"`
	// LocalBandwidth (bytes/s) and LocalLatency (s) hold inside the innermost
	// domain: NVLink between the GPUs of one host.
	LocalBandwidth float64 `json:"local_bandwidth_bytes_per_s"`
	LocalLatency   float64 `json:"local_latency_s"`
	// Tiers, innermost first; levels beyond the last use the last.
	Tiers []Tier `json:"tiers"`
}

// DefaultCostModel returns rough figures for an 8-GPU H100-class cluster
// on a 400 Gb/s-per-GPU fabric. They are meant to rank orders against each
// other, not to predict a job's step time:
//
//   - 1 GiB all-reduced (the gradients of a half-billion-parameter model in bf16);
//   - same host: NVLink 4, 18 links x 25 GB/s = 450 GB/s each way, 2 us;
//   - host: 8 x 400 Gb/s NICs = 400 GB/s out of a host, 5 us through a leaf switch;
//   - rack: 8 hosts behind a 2:1 oversubscribed leaf, 1.6 TB/s, 8 us;
//   - block: 8 racks, 2:1 again, 6.4 TB/s, 15 us;
//   - zone: 400 GB/s of links between zones, 500 us across them.
func DefaultCostModel() CostModel {
	return CostModel{
		Bytes:          1 << 30,
		LocalBandwidth: 450e9,
		LocalLatency:   2e-6,
		Tiers: []Tier{
			{Name: "host", Uplink: 400e9, Latency: 5e-6},
			{Name: "rack", Uplink: 1.6e12, Latency: 8e-6},
			{Name: "block", Uplink: 6.4e12, Latency: 15e-6},
			{Name: "zone", Uplink: 400e9, Latency: 500e-6},
		},
	}
}

// Validate reports figures that would make the model meaningless.
func (c CostModel) Validate() error {
	var errs []error
	if !(c.Bytes > 0) {
		errs = append(errs, fmt.Errorf("cost model: bytes must be positive, got %g", c.Bytes))
	}
	if !(c.LocalBandwidth > 0) || c.LocalLatency < 0 {
		errs = append(errs, fmt.Errorf("cost model: local bandwidth must be positive and latency not negative, got %g B/s, %g s", c.LocalBandwidth, c.LocalLatency))
	}
	if len(c.Tiers) == 0 {
		errs = append(errs, errors.New("cost model: no tiers"))
	}
	for i, t := range c.Tiers {
		if !(t.Uplink > 0) || t.Latency < 0 {
			errs = append(errs, fmt.Errorf("cost model: tier %d (%s): uplink must be positive and latency not negative, got %g B/s, %g s", i, t.Name, t.Uplink, t.Latency))
		}
	}
	return errors.Join(errs...)
}

// Estimate is the modelled time of one all-reduce over a ring order.
type Estimate struct {
	Seconds          float64 `json:"seconds"`
	BandwidthSeconds float64 `json:"bandwidth_s"`
	LatencySeconds   float64 `json:"latency_s"`
	// Ranks is N, the sum of the members' slots.
	Ranks int `json:"ranks"`
	// MinBandwidth (bytes/s) and MaxLatency (s) are the slowest edge's.
	MinBandwidth float64 `json:"min_bandwidth_bytes_per_s"`
	MaxLatency   float64 `json:"max_latency_s"`
	// Bottleneck names the edge with the least bandwidth, "w3 -> w9".
	Bottleneck string `json:"bottleneck,omitempty"`
}

// tier returns the tier of level u counted from the innermost.
func (c CostModel) tier(u int) Tier {
	return c.Tiers[min(u, len(c.Tiers)-1)]
}

// AllReduce models one all-reduce of c.Bytes over the ring order. c must
// be valid.
func (c CostModel) AllReduce(order []record.MemberInfo) Estimate {
	est := Estimate{MinBandwidth: math.Inf(1)}
	for _, m := range order {
		est.Ranks += max(m.Slots, 1)
		if m.Slots > 1 {
			consider(&est, c.LocalBandwidth, c.LocalLatency, m.ID+" (inside)")
		}
	}
	if est.Ranks < 2 {
		return Estimate{Ranks: est.Ranks}
	}
	ids, counts := levelDomains(order)
	depth := len(counts)
	// leaving[j][d] counts the ring edges that leave domain d of level j.
	leaving := make([][]int, depth)
	for j := range leaving {
		leaving[j] = make([]int, counts[j])
	}
	n := len(order)
	for i := range n {
		for j := range depth {
			if ids[i][j] != ids[(i+1)%n][j] {
				leaving[j][ids[i][j]]++
			}
		}
	}
	for i := range n {
		next := (i + 1) % n
		s := 0 // levels shared
		for s < depth && ids[i][s] == ids[next][s] {
			s++
		}
		if s == depth {
			consider(&est, c.LocalBandwidth, c.LocalLatency, order[i].ID+" -> "+order[next].ID)
			continue
		}
		bw := math.Inf(1)
		for j := s; j < depth; j++ {
			up := c.tier(depth - 1 - j).Uplink
			bw = min(bw, up/float64(leaving[j][ids[i][j]]), up/float64(leaving[j][ids[next][j]]))
		}
		consider(&est, bw, c.tier(depth-1-s).Latency, order[i].ID+" -> "+order[next].ID)
	}
	r := float64(est.Ranks)
	est.BandwidthSeconds = 2 * (r - 1) / r * c.Bytes / est.MinBandwidth
	est.LatencySeconds = 2 * (r - 1) * est.MaxLatency
	est.Seconds = est.BandwidthSeconds + est.LatencySeconds
	return est
}

// consider folds one edge into the estimate.
func consider(est *Estimate, bw, latency float64, edge string) {
	if bw < est.MinBandwidth {
		est.MinBandwidth, est.Bottleneck = bw, edge
	}
	est.MaxLatency = max(est.MaxLatency, latency)
}
