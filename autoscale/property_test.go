package autoscale

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

func drawRules(t *rapid.T, name string) *autoscalingv2.HPAScalingRules {
	if rapid.Bool().Draw(t, name+"Nil") {
		return nil
	}
	r := &autoscalingv2.HPAScalingRules{}
	if rapid.Bool().Draw(t, name+"Window") {
		r.StabilizationWindowSeconds = ptr.To(rapid.Int32Range(-10, 3600).Draw(t, name+"WindowSeconds"))
	}
	if rapid.Bool().Draw(t, name+"Select") {
		r.SelectPolicy = ptr.To(rapid.SampledFrom([]autoscalingv2.ScalingPolicySelect{
			autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect, autoscalingv2.DisabledPolicySelect, "Bogus"}).Draw(t, name+"SelectPolicy"))
	}
	for i := range rapid.IntRange(0, 3).Draw(t, name+"Policies") {
		r.Policies = append(r.Policies, autoscalingv2.HPAScalingPolicy{
			Type:          rapid.SampledFrom([]autoscalingv2.HPAScalingPolicyType{autoscalingv2.PodsScalingPolicy, autoscalingv2.PercentScalingPolicy}).Draw(t, name+"Type"),
			Value:         rapid.Int32Range(0, 1000).Draw(t, name+"Value"),
			PeriodSeconds: rapid.Int32Range(0, 1800).Draw(t, name+"Period"),
		})
		_ = i
	}
	return r
}

// drawInput draws any input, odd ones included: specs the schema would
// reject, readings that are zero or not finite, recommendations and
// changes at any time.
func drawInput(t *rapid.T) Input {
	now := t0.Add(time.Duration(rapid.IntRange(0, 3600).Draw(t, "now")) * time.Second)
	ago := func(name string) time.Time {
		return now.Add(-time.Duration(rapid.IntRange(-60, 1200).Draw(t, name)) * time.Second)
	}
	in := Input{
		Now: now,
		Spec: v1alpha1.ElasticScalerSpec{
			MinReplicas:           rapid.Int32Range(-2, 20).Draw(t, "min"),
			MaxReplicas:           rapid.Int32Range(-2, 64).Draw(t, "max"),
			Unit:                  rapid.Int32Range(-1, 8).Draw(t, "unit"),
			TargetEfficiency:      rapid.Float64Range(-0.5, 1.5).Draw(t, "target"),
			PendingTimeoutSeconds: rapid.Int32Range(-1, 600).Draw(t, "pendingTimeout"),
		},
		Current:    rapid.Int32Range(-5, 100).Draw(t, "current"),
		Workers:    rapid.Int32Range(-1, 100).Draw(t, "workers"),
		Draining:   rapid.Int32Range(0, 3).Draw(t, "draining"),
		Pending:    rapid.Int32Range(0, 5).Draw(t, "pending"),
		PendingFor: time.Duration(rapid.IntRange(0, 600).Draw(t, "pendingFor")) * time.Second,
		HaveStatus: rapid.Bool().Draw(t, "haveStatus"),
		StatusAge:  time.Duration(rapid.IntRange(0, 300).Draw(t, "statusAge")) * time.Second,
	}
	if rapid.Bool().Draw(t, "behavior") {
		in.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: drawRules(t, "up"), ScaleDown: drawRules(t, "down")}
	}
	values := rapid.SampledFrom([]float64{0, -1, math.NaN(), math.Inf(1), 1e-9, 1e12})
	for i := range rapid.IntRange(0, 12).Draw(t, "sizes") {
		s := rapid.Float64Range(0, 1e4).Draw(t, "throughput")
		if rapid.IntRange(0, 9).Draw(t, "odd") == 0 {
			s = values.Draw(t, "oddThroughput")
		}
		in.Throughput = append(in.Throughput, v1alpha1.WorldSizeThroughput{
			WorldSize: rapid.Int32Range(-1, 100).Draw(t, "worldSize"), SamplesPerSecond: s,
			Goodput: s * rapid.Float64Range(0, 1).Draw(t, "efficiency"), Observations: int32(i + 1),
			LastObservedTime: metav1.NewTime(ago("observed")),
		})
	}
	for range rapid.IntRange(0, 20).Draw(t, "recommendations") {
		in.Recommendations = append(in.Recommendations, Recommendation{Time: ago("recommended"), Replicas: rapid.Int32Range(-5, 100).Draw(t, "replicas")})
	}
	for range rapid.IntRange(0, 5).Draw(t, "changes") {
		in.Changes = append(in.Changes, Change{Time: ago("changed"), From: rapid.Int32Range(0, 100).Draw(t, "from"), To: rapid.Int32Range(0, 100).Draw(t, "to")})
	}
	return in
}

func TestDecideStaysInRangeOnTheUnit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := drawInput(t)
		d := Decide(in)
		p := paramsOf(in.Spec)
		for name, n := range map[string]int32{"desired": d.Desired, "recommendation": d.Recommendation} {
			if n < p.min || n > p.max || n%p.unit != 0 {
				t.Fatalf("%s %d, want a multiple of %d in [%d, %d] (spec %+v)", name, n, p.unit, p.min, p.max, in.Spec)
			}
		}
		if p.min < 1 || p.min > p.max {
			t.Fatalf("bounds [%d, %d] from spec %+v", p.min, p.max, in.Spec)
		}
		if d.Reason == "" || d.Message == "" || d.Limited != (d.LimitReason != "") {
			t.Fatalf("decision %+v: want a reason, a message and a limit reason exactly when limited", d)
		}
		if !reflect.DeepEqual(d, Decide(in)) {
			t.Fatal("Decide is not deterministic")
		}
	})
}

func TestObserveStaysBoundedAndFinite(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h []v1alpha1.WorldSizeThroughput
		for i := range rapid.IntRange(1, 200).Draw(t, "readings") {
			m := Measurement{
				Time:           t0.Add(time.Duration(i) * time.Second),
				WorldSize:      rapid.Int32Range(-1, 100).Draw(t, "worldSize"),
				SamplesPerSec:  rapid.SampledFrom([]float64{0, -1, math.NaN(), math.Inf(1), 1, 100, 1e6}).Draw(t, "throughput"),
				BatchPerWorker: rapid.SampledFrom([]float64{0, -1, 32, math.NaN()}).Draw(t, "batch"),
			}
			if rapid.Bool().Draw(t, "gns") {
				m.GNS = ptr.To(rapid.SampledFrom([]float64{0, -1, 100, math.Inf(1), math.NaN()}).Draw(t, "gnsValue"))
			}
			h = Observe(h, m)
		}
		if len(h) > maxHistory {
			t.Fatalf("%d sizes kept", len(h))
		}
		for i, e := range h {
			if e.WorldSize < 1 || !finitePositive(e.SamplesPerSecond) || !(e.Goodput > 0) || e.Goodput > e.SamplesPerSecond*(1+1e-9) || e.Observations < 1 {
				t.Fatalf("entry %+v", e)
			}
			if i > 0 && h[i-1].WorldSize >= e.WorldSize {
				t.Fatalf("sizes out of order: %+v", h)
			}
		}
	})
}

// On a concave curve (communication cost, and a noise scale that makes big
// batches worth less) the policy, fed exact readings, grows and settles: it
// changes direction at most once (a single measured size assumes linear
// scaling, and may grow once too far) and ends where it stays.
func TestDecideConvergesOnConcaveCurves(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		unit := rapid.Int32Range(1, 4).Draw(t, "unit")
		spec := v1alpha1.ElasticScalerSpec{
			MinReplicas:           unit * rapid.Int32Range(1, 3).Draw(t, "minUnits"),
			Unit:                  unit,
			TargetEfficiency:      rapid.Float64Range(0.3, 0.95).Draw(t, "target"),
			PendingTimeoutSeconds: 120,
		}
		spec.MaxReplicas = spec.MinReplicas + unit*rapid.Int32Range(0, 16).Draw(t, "extraUnits")
		curve := amdahl(rapid.Float64Range(1, 1000).Draw(t, "rate"), rapid.Float64Range(0, 0.5).Draw(t, "commCost"))
		var gns *float64
		if rapid.Bool().Draw(t, "withGNS") {
			gns = ptr.To(rapid.Float64Range(0, 4096).Draw(t, "gns"))
		}
		start := spec.MinReplicas + unit*rapid.Int32Range(0, 4).Draw(t, "startUnits")
		sizes := converge(spec, start, 400, 0, 1, func(n int32, _ *rand.Rand) Measurement {
			return Measurement{WorldSize: n, SamplesPerSec: curve(n), GNS: gns, BatchPerWorker: 32}
		})
		if n := directionChanges(sizes); n > 1 {
			t.Fatalf("%d direction changes: %v", n, sizes)
		}
		last := sizes[len(sizes)-1]
		for _, n := range sizes[len(sizes)-100:] {
			if n != last {
				t.Fatalf("still moving in the last 100 syncs: %v", sizes)
			}
		}
	})
}
