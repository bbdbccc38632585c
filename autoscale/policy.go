package autoscale

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// Input is everything Decide needs: the scaler's spec, the target's size,
// the job's members and measurements, and the decisions and scale changes
// of the recent past (for the stabilization windows and policies).
type Input struct {
	// Now is the time of the decision.
	Now time.Time
	// Spec is the ElasticScaler's spec as stored (the API server applied
	// the schema's defaults; Behavior may be nil).
	Spec v1alpha1.ElasticScalerSpec
	// Current is the target's replicas (its scale's spec.replicas).
	Current int32
	// Workers counts the job's members that are capacity now: in the
	// generation and not draining.
	Workers int32
	// Draining counts the members leaving the job (not capacity).
	Draining int32
	// Pending counts the target's pods the cluster has not placed, and
	// PendingFor is how long the oldest of them has waited.
	Pending    int32
	PendingFor time.Duration
	// HaveStatus is false while the job has stored no generation or no
	// member has reported a heartbeat; StatusAge is the age of the newest
	// heartbeat.
	HaveStatus bool
	StatusAge  time.Duration
	// Throughput is the job's measured throughput per world size.
	Throughput []v1alpha1.WorldSizeThroughput
	// Recommendations are the sizes Decide recommended before, newest
	// last, as the controller keeps them for the stabilization windows.
	Recommendations []Recommendation
	// Changes are the target's recent scale changes, newest last, for
	// the scaling policies' periods.
	Changes []Change
}

// Recommendation is one size Decide recommended, at Time.
type Recommendation struct {
	Time     time.Time
	Replicas int32
}

// Change is one change of the target's replicas, from From to To at Time.
type Change struct {
	Time     time.Time
	From, To int32
}

// Decision is what Decide chose and why.
type Decision struct {
	// Desired is the size to set the target to (Current to hold).
	Desired int32
	// Recommendation is the unstabilized size Decide recommends now, for
	// the caller to keep and pass back in Input.Recommendations.
	Recommendation int32
	// Efficiency is the marginal efficiency the decision used, nil when
	// there was none to estimate.
	Efficiency *float64
	// Reason is a CamelCase reason for events and conditions (such as
	// ScaledUp, ScaledDown, Hold, NoStatus, PendingWorkers) and Message
	// says what was seen, for people.
	Reason, Message string
	// Active is false when the measurements are missing or stale: the
	// size was held (the ScalingActive condition).
	Active bool
	// Limited is true when min, max, a policy or pending workers held the
	// size back from the recommendation (the ScalingLimited condition),
	// with LimitReason and LimitMessage saying which.
	Limited                   bool
	LimitReason, LimitMessage string
}

// Decide decides the target's size from in. It is a pure function: the
// same input gives the same decision.
func Decide(in Input) Decision {
	// Placeholder until the goodput policy lands: hold the size within
	// [min, max].
	d := clamp(in.Current, in.Spec.MinReplicas, in.Spec.MaxReplicas)
	return Decision{Desired: d, Recommendation: d, Reason: "Hold", Message: "holding the current size", Active: in.HaveStatus}
}

// Measurement is one reading of the job: its world size and throughput
// then, with the gradient noise scale its trainers reported (nil when none
// did) and the samples per step of one worker.
type Measurement struct {
	Time           time.Time
	WorldSize      int32
	SamplesPerSec  float64
	GNS            *float64
	BatchPerWorker float64
}

// Observe folds m into the throughput history hist (one entry per world
// size) and returns the new history, hist left unchanged.
func Observe(hist []v1alpha1.WorldSizeThroughput, m Measurement) []v1alpha1.WorldSizeThroughput {
	// Placeholder until the goodput policy lands: the newest reading per
	// size.
	out := make([]v1alpha1.WorldSizeThroughput, 0, len(hist)+1)
	for _, h := range hist {
		if h.WorldSize != m.WorldSize {
			out = append(out, h)
		}
	}
	return append(out, v1alpha1.WorldSizeThroughput{WorldSize: m.WorldSize, SamplesPerSecond: m.SamplesPerSec,
		Goodput: m.SamplesPerSec, Observations: 1, LastObservedTime: metav1.NewTime(m.Time)})
}

func clamp(n, lo, hi int32) int32 {
	return max(lo, min(hi, n))
}
