package netopt

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testPlan plans a shuffled 3-level cluster of 16 hosts, 4 ranks each.
func testPlan(t *testing.T) Plan {
	t.Helper()
	cluster, err := GenerateCluster(ClusterSpec{Members: 16, Levels: 3, Fanout: 2, Slots: 4}, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	p := PlanCluster(cluster, DefaultCostModel())
	p.Took = 1234567 * time.Nanosecond // the golden file holds no measured time
	return p
}

func TestPlanWriteTextMatchesTheGoldenFile(t *testing.T) {
	var b strings.Builder
	if err := testPlan(t).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	matchGolden(t, "plan", b.String())
}

func TestPlanSummary(t *testing.T) {
	p := testPlan(t)
	s := p.Summary(false)
	if s.Members != 16 || s.PlanMS != 1.235 || s.Order != nil {
		t.Errorf("members %d, plan_ms %g, order %v; want 16, 1.235, none", s.Members, s.PlanMS, s.Order)
	}
	want := []LevelStats{{Level: 0, Domains: 4, CrossEdges: 4}, {Level: 1, Domains: 8, CrossEdges: 8}, {Level: 2, Domains: 16, CrossEdges: 16}}
	if diff := cmp.Diff(want, s.Levels); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
	planned, given := p.Model.AllReduce(p.Planned).Seconds, p.Model.AllReduce(p.Given).Seconds
	if s.Modelled.Planned != round(planned, 6) || s.Modelled.Given != round(given, 6) || s.Modelled.Planned == 0 {
		t.Errorf("modelled planned %g, given %g; want %g, %g to the microsecond", s.Modelled.Planned, s.Modelled.Given, planned, given)
	}
	withOrder := p.Summary(true)
	if len(withOrder.Order) != 16 || withOrder.Order[0] != p.Planned[0].ID {
		t.Errorf("order %v, want the planned one", withOrder.Order)
	}
	line, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(line, &keys); err != nil {
		t.Fatal(err)
	}
	// The keys documented in `ringside netopt plan --help`.
	for _, k := range []string{"members", "levels", "plan_ms", "modelled_allreduce_s"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("missing key %q in %s", k, line)
		}
	}
	if _, ok := keys["order"]; ok {
		t.Errorf("order present without being asked for: %s", line)
	}
}

func TestFormatBytes(t *testing.T) {
	for b, want := range map[float64]string{0: "0 B", 1000: "1000 B", 1 << 30: "1 GiB", 1.5 * (1 << 20): "1.5 MiB", 1 << 50: "1024 TiB"} {
		if got := formatBytes(b); got != want {
			t.Errorf("formatBytes(%g) = %q, want %q", b, got, want)
		}
	}
}
