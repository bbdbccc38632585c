package autoscale

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// amdahl is a throughput curve that bends with communication cost:
// n·r/(1 + c·(n-1)).
func amdahl(r, c float64) func(int32) float64 {
	return func(n int32) float64 { return float64(n) * r / (1 + c*float64(n-1)) }
}

// jobInput is a job at n workers (the target's size too) whose history
// holds one reading of curve at each of sizes, taken 15 s before Now.
func jobInput(n int32, curve func(int32) float64, sizes ...int32) Input {
	var ms []Measurement
	for _, s := range sizes {
		ms = append(ms, reading(s, curve(s), 0))
	}
	return Input{
		Now:        t0.Add(15 * time.Second),
		Spec:       v1alpha1.ElasticScalerSpec{MinReplicas: 1, MaxReplicas: 16, Unit: 1, TargetEfficiency: 0.7, PendingTimeoutSeconds: 120},
		Current:    n,
		Workers:    n,
		HaveStatus: true,
		StatusAge:  2 * time.Second,
		Throughput: observeAll(ms...),
	}
}

func with(in Input, f func(*Input)) Input { f(&in); return in }

func TestDecide(t *testing.T) {
	linear := amdahl(100, 0)
	bent := amdahl(100, 0.1) // marginal efficiency 0.75 at 2, 0.69 at 3, 0.64 at 4
	tests := []struct {
		name        string
		in          Input
		desired     int32
		reason      string
		limitReason string
		inactive    bool
	}{
		{"a single sample grows once to learn", jobInput(1, linear, 1), 2, "ScaledUp", "", false},
		{"linear scaling grows", jobInput(4, linear, 1, 2, 3, 4), 5, "ScaledUp", "", false},
		{"a bent curve holds where one more worker is below target and the last above", jobInput(3, bent, 1, 2, 3, 4), 3, "Hold", "", false},
		{"a bent curve shrinks when the last worker is below target", jobInput(4, bent, 1, 2, 3, 4), 3, "ScaledDown", "", false},
		{"a bent curve is extrapolated beyond the largest size", jobInput(3, bent, 1, 2, 3), 3, "Hold", "", false},
		{"a curve measured only higher up is extrapolated down", jobInput(8, bent, 8, 9, 10), 7, "ScaledDown", "", false},
		{"no status holds", with(jobInput(2, linear, 1, 2), func(in *Input) { in.HaveStatus = false }), 2, "NoStatus", "", true},
		{"stale status holds", with(jobInput(2, linear, 1, 2), func(in *Input) { in.StatusAge = 2 * time.Minute }), 2, "StaleStatus", "", true},
		{"stale status below min still raises to min", with(jobInput(2, linear, 1, 2), func(in *Input) {
			in.StatusAge, in.Spec.MinReplicas = 2*time.Minute, 4
		}), 4, "ScaledUp", "TooFewReplicas", true},
		{"no throughput at the current size holds", jobInput(3, linear, 1, 2), 3, "NoThroughput", "", false},
		{"zero throughput (no recent reading) holds", with(jobInput(2, linear, 1, 2), func(in *Input) {
			in.Now = in.Now.Add(5 * time.Minute) // every reading since was zero, and left out
			in.StatusAge = time.Second
		}), 2, "NoThroughput", "", false},
		{"a zero entry holds", with(jobInput(2, linear, 1, 2), func(in *Input) {
			in.Throughput[1].SamplesPerSecond, in.Throughput[1].Goodput = 0, 0
		}), 2, "NoThroughput", "", false},
		{"draining members hold", with(jobInput(4, linear, 1, 2, 3, 4), func(in *Input) { in.Draining = 1 }), 4, "Draining", "", false},
		{"draining members are not capacity", with(jobInput(4, linear, 3, 4), func(in *Input) { in.Workers, in.Draining = 3, 1 }), 4, "Draining", "", false},
		{"workers still joining hold", with(jobInput(4, linear, 3, 4), func(in *Input) { in.Workers = 3 }), 4, "Resizing", "", false},
		{"pods pending a short while hold", with(jobInput(6, linear, 4, 6), func(in *Input) {
			in.Workers, in.Pending, in.PendingFor = 4, 2, 30*time.Second
		}), 6, "Resizing", "", false},
		{"pods pending past the timeout shrink back to what runs", with(jobInput(6, linear, 4, 6), func(in *Input) {
			in.Workers, in.Pending, in.PendingFor = 4, 2, 3*time.Minute
		}), 4, "ScaledDown", "PendingWorkers", false},
		{"the pending shrink is not held by the scale-down window", with(jobInput(6, linear, 4, 6), func(in *Input) {
			in.Workers, in.Pending, in.PendingFor = 4, 2, 3*time.Minute
			in.Recommendations = []Recommendation{{Time: in.Now.Add(-time.Minute), Replicas: 6}}
		}), 4, "ScaledDown", "PendingWorkers", false},
		{"the pending shrink rounds up to the unit and stops at min", with(jobInput(12, linear, 12), func(in *Input) {
			in.Spec.Unit, in.Spec.MinReplicas, in.Spec.MaxReplicas = 4, 8, 16
			in.Workers, in.Pending, in.PendingFor = 5, 7, 3*time.Minute
		}), 8, "ScaledDown", "PendingWorkers", false},
		{"max holds growth", with(jobInput(4, linear, 1, 2, 3, 4), func(in *Input) { in.Spec.MaxReplicas = 4 }), 4, "Hold", "TooManyReplicas", false},
		{"min holds a shrink", with(jobInput(4, bent, 1, 2, 3, 4), func(in *Input) { in.Spec.MinReplicas = 4 }), 4, "Hold", "TooFewReplicas", false},
		{"a target above max comes down at once", with(jobInput(20, linear, 20), func(in *Input) {}), 16, "ScaledDown", "TooManyReplicas", false},
		{"a target of 0 comes up to min", with(jobInput(0, linear, 1), func(in *Input) { in.Spec.MinReplicas = 2 }), 2, "ScaledUp", "TooFewReplicas", false},
		{"a target off the unit is rounded to it", with(jobInput(6, linear, 6), func(in *Input) { in.Spec.Unit = 4 }), 8, "ScaledUp", "", false},
		{"the unit is the step", with(jobInput(4, linear, 4), func(in *Input) { in.Spec.Unit = 4 }), 8, "ScaledUp", "", false},
		{"a lower recommendation in the scale-up window holds growth", with(jobInput(4, linear, 1, 2, 3, 4), func(in *Input) {
			in.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](60)}}
			in.Recommendations = []Recommendation{{Time: in.Now.Add(-30 * time.Second), Replicas: 4}}
		}), 4, "ScaleUpStabilized", "", false},
		{"a higher recommendation in the scale-down window holds a shrink", with(jobInput(4, bent, 1, 2, 3, 4), func(in *Input) {
			in.Recommendations = []Recommendation{{Time: in.Now.Add(-4 * time.Minute), Replicas: 5}, {Time: in.Now.Add(-time.Minute), Replicas: 4}}
		}), 4, "ScaleDownStabilized", "", false},
		{"a recommendation older than the scale-down window does not", with(jobInput(4, bent, 1, 2, 3, 4), func(in *Input) {
			in.Recommendations = []Recommendation{{Time: in.Now.Add(-6 * time.Minute), Replicas: 5}}
		}), 3, "ScaledDown", "", false},
		{"growth waits for the scale-down window after a scale-down", with(jobInput(4, linear, 1, 2, 3, 4), func(in *Input) {
			in.Changes = []Change{{Time: in.Now.Add(-2 * time.Minute), From: 5, To: 4}}
		}), 4, "Hold", "ReversalBackoff", false},
		{"and grows once it has passed", with(jobInput(4, linear, 1, 2, 3, 4), func(in *Input) {
			in.Changes = []Change{{Time: in.Now.Add(-6 * time.Minute), From: 5, To: 4}}
		}), 5, "ScaledUp", "", false},
		{"a pods policy limits growth per period", with(jobInput(4, linear, 1, 2, 3, 4), func(in *Input) {
			in.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 60}}}}
			in.Changes = []Change{{Time: in.Now.Add(-30 * time.Second), From: 3, To: 4}}
		}), 4, "Hold", "ScaleUpLimit", false},
		{"a policy allowing less than a unit holds", with(jobInput(4, linear, 4), func(in *Input) {
			in.Spec.Unit = 4
			in.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}}}}
		}), 4, "Hold", "ScaleUpLimit", false},
		{"selectPolicy Disabled holds a shrink", with(jobInput(4, bent, 1, 2, 3, 4), func(in *Input) {
			in.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{SelectPolicy: ptr.To(autoscalingv2.DisabledPolicySelect)}}
		}), 4, "Hold", "ScaleDownLimit", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Desired != tt.desired || d.Reason != tt.reason || d.LimitReason != tt.limitReason || d.Limited != (tt.limitReason != "") || d.Active == tt.inactive {
				t.Errorf("Decide = desired %d, reason %s, limited %v %s, active %v; want %d, %s, %q, active %v\nmessage: %s\nlimit: %s",
					d.Desired, d.Reason, d.Limited, d.LimitReason, d.Active, tt.desired, tt.reason, tt.limitReason, !tt.inactive, d.Message, d.LimitMessage)
			}
			if d.Message == "" {
				t.Error("no message")
			}
		})
	}
}

func TestDecideReportsTheMarginalEfficiency(t *testing.T) {
	d := Decide(jobInput(3, amdahl(100, 0.1), 1, 2, 3, 4))
	// g(3) = 250, g(4) = 307.69: (307.69-250) / (250/3) = 0.692.
	if d.Efficiency == nil || math.Abs(*d.Efficiency-0.6923) > 1e-3 {
		t.Errorf("efficiency %v, want 0.692", d.Efficiency)
	}
	if !strings.Contains(d.Message, "0.69") {
		t.Errorf("message %q does not give the efficiency", d.Message)
	}
	if d := Decide(with(jobInput(2, amdahl(100, 0), 2), func(in *Input) { in.HaveStatus = false })); d.Efficiency != nil {
		t.Errorf("efficiency %v without status, want none", *d.Efficiency)
	}
}

// converge runs the policy against a job whose goodput at n workers is
// truth(n), with readings off by up to noise (relative), applying every
// decision at once, for syncs of 15 s from start. It returns the sizes
// after each sync.
func converge(spec v1alpha1.ElasticScalerSpec, start int32, syncs int, noise float64, seed uint64, reading func(n int32, r *rand.Rand) Measurement) []int32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	in := Input{Spec: spec, Current: start, Workers: start, HaveStatus: true}
	var sizes []int32
	for i := range syncs {
		in.Now = t0.Add(time.Duration(i) * 15 * time.Second)
		m := reading(in.Workers, rng)
		m.Time = in.Now
		m.SamplesPerSec *= 1 + noise*(2*rng.Float64()-1)
		in.Throughput = Observe(in.Throughput, m)
		d := Decide(in)
		in.Recommendations = append(in.Recommendations, Recommendation{Time: in.Now, Replicas: d.Recommendation})
		if d.Desired != in.Current {
			in.Changes = append(in.Changes, Change{Time: in.Now, From: in.Current, To: d.Desired})
		}
		in.Current, in.Workers = d.Desired, d.Desired
		sizes = append(sizes, in.Current)
	}
	return sizes
}

func throughputReading(curve func(int32) float64) func(int32, *rand.Rand) Measurement {
	return func(n int32, _ *rand.Rand) Measurement { return Measurement{WorldSize: n, SamplesPerSec: curve(n)} }
}

func directionChanges(sizes []int32) int {
	changes, dir := 0, 0
	for i := 1; i < len(sizes); i++ {
		d := cmpInt(sizes[i], sizes[i-1])
		if d != 0 && dir != 0 && d != dir {
			changes++
		}
		if d != 0 {
			dir = d
		}
	}
	return changes
}

func cmpInt(a, b int32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestDecideConvergesToTheKnee(t *testing.T) {
	spec := v1alpha1.ElasticScalerSpec{MinReplicas: 1, MaxReplicas: 32, Unit: 1, TargetEfficiency: 0.7, PendingTimeoutSeconds: 120}
	// (1-c)/(1+c(n-1)) >= 0.7 up to n = 8 for c = 0.05 (see curve.marginal).
	sizes := converge(spec, 1, 120, 0, 1, throughputReading(amdahl(100, 0.05)))
	if got := sizes[len(sizes)-1]; got != 8 {
		t.Errorf("settled at %d workers, want 8: %v", got, sizes)
	}
	if n := directionChanges(sizes); n != 0 {
		t.Errorf("%d direction changes on exact readings, want none: %v", n, sizes)
	}
}

func TestDecideOnNoisyReadingsSettlesNearTheKnee(t *testing.T) {
	spec := v1alpha1.ElasticScalerSpec{MinReplicas: 1, MaxReplicas: 32, Unit: 1, TargetEfficiency: 0.7, PendingTimeoutSeconds: 120}
	for seed := range uint64(5) {
		sizes := converge(spec, 1, 480, 0.05, seed, throughputReading(amdahl(100, 0.05)))
		last := sizes[len(sizes)-120:] // the last half hour
		for _, n := range last {
			if n < 6 || n > 10 {
				t.Errorf("seed %d: %d workers in the last half hour, want 6 to 10 (the knee is at 8): %v", seed, n, last)
				break
			}
		}
	}
}

func TestDecideGNSStopsGrowthEarlier(t *testing.T) {
	spec := v1alpha1.ElasticScalerSpec{MinReplicas: 1, MaxReplicas: 64, Unit: 1, TargetEfficiency: 0.7, PendingTimeoutSeconds: 120}
	curve := amdahl(100, 0.02)
	plain := converge(spec, 1, 200, 0, 1, throughputReading(curve))
	gns := 256.0
	noisy := converge(spec, 1, 200, 0, 1, func(n int32, _ *rand.Rand) Measurement {
		return Measurement{WorldSize: n, SamplesPerSec: curve(n), GNS: &gns, BatchPerWorker: 32}
	})
	p, g := plain[len(plain)-1], noisy[len(noisy)-1]
	if g >= p || g < 2 {
		t.Errorf("with a gradient noise scale of 256 the job settled at %d workers, without at %d: want fewer with it (a bigger batch is worth less)", g, p)
	}
	if n := directionChanges(noisy); n > 0 {
		t.Errorf("%d direction changes with the noise scale: %v", n, noisy)
	}
}
