package netopt

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

// Plan is a ring planned for a cluster file beside the file's own order,
// under one cost model: what `ringside netopt plan` shows.
type Plan struct {
	Model CostModel
	// Given is the file's order, Planned the Orderer's.
	Given, Planned []record.MemberInfo
	// Took is how long the Orderer took.
	Took time.Duration
}

// PlanCluster orders the cluster as the coordinator would for a fresh job.
// model must be valid (see CostModel.Validate).
func PlanCluster(cluster []ClusterMember, model CostModel) Plan {
	given := Members(cluster)
	start := time.Now()
	planned := NewOrderer().Order(nil, given)
	return Plan{Model: model, Given: given, Planned: planned, Took: time.Since(start)}
}

// PlanSummary is the one-line JSON of `ringside netopt plan --json`.
type PlanSummary struct {
	Members  int          `json:"members"`
	Levels   []LevelStats `json:"levels"`
	PlanMS   float64      `json:"plan_ms"`
	Modelled struct {
		Planned float64 `json:"planned"`
		Given   float64 `json:"given"`
	} `json:"modelled_allreduce_s"`
	// Order is the planned order of ids, when asked for.
	Order []string `json:"order,omitempty"`
}

// Summary returns the figures of p, rounded to what they mean (the plan's
// time to microseconds); withOrder adds the planned order.
func (p Plan) Summary(withOrder bool) PlanSummary {
	s := PlanSummary{Members: len(p.Planned), Levels: RingLevels(p.Planned), PlanMS: round(p.Took.Seconds()*1000, 3)}
	s.Modelled.Planned = round(p.Model.AllReduce(p.Planned).Seconds, 6)
	s.Modelled.Given = round(p.Model.AllReduce(p.Given).Seconds, 6)
	if withOrder {
		for _, m := range p.Planned {
			s.Order = append(s.Order, m.ID)
		}
	}
	return s
}

func round(x float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(x*f) / f
}

// WriteText writes the plan for people: the cross edges of every level
// in both orders, the modelled all-reduce of both, and the planned order.
func (p Plan) WriteText(w io.Writer) error {
	planned, given := p.Model.AllReduce(p.Planned), p.Model.AllReduce(p.Given)
	fmt.Fprintf(w, "planned a ring of %d members (%d ranks) in %.3f ms\n\n", len(p.Planned), planned.Ranks, p.Took.Seconds()*1000)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "level\tdomains\tcross edges planned\tcross edges given")
	gl := RingLevels(p.Given)
	for i, l := range RingLevels(p.Planned) {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\n", l.Level, l.Domains, l.CrossEdges, gl[i].CrossEdges)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	fmt.Fprintf(w, "\nmodelled all-reduce of %s (alpha-beta; the slowest edge paces the ring):\n", formatBytes(p.Model.Bytes))
	for _, e := range []struct {
		name string
		est  Estimate
	}{{"planned", planned}, {"given", given}} {
		fmt.Fprintf(w, "  %-8s %.6f s  (bandwidth %.6f s at %.4g GB/s, latency %.6f s at %.1f us per step; slowest edge %s)\n",
			e.name, e.est.Seconds, e.est.BandwidthSeconds, e.est.MinBandwidth/1e9, e.est.LatencySeconds, e.est.MaxLatency*1e6, e.est.Bottleneck)
	}
	fmt.Fprintln(w, "\nring order:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  first rank\tid\tslots\ttopology")
	rank := 0
	for _, m := range p.Planned {
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", rank, m.ID, m.Slots, strings.Join(m.Topology, "/"))
		rank += m.Slots
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

// formatBytes writes b in binary units, four significant digits.
func formatBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.4g %s", b, units[i])
}
