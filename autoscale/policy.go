package autoscale

import (
	"fmt"
	"time"

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
	// Throughput is the job's measured throughput per world size, as
	// Observe keeps it: the caller folds the job's reading into it at
	// every sync, and Decide acts only on a reading at the current size
	// newer than StaleStatusAfter.
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
	// Reason is a CamelCase reason for events and conditions and Message
	// says what was seen, for people. Desired above Current is ScaledUp,
	// below it ScaledDown; a held size says why: Hold (the marginal
	// efficiencies keep the size), NoStatus and StaleStatus (Active is
	// false), NoThroughput (no positive reading at the current size
	// within StaleStatusAfter), Draining, Resizing (the job's workers or
	// pending pods do not match the target yet), PendingWorkers,
	// ScaleUpStabilized or ScaleDownStabilized (a recommendation within
	// the window holds the size, as the HorizontalPodAutoscaler's
	// AbleToScale reasons).
	Reason, Message string
	// Active is false when the measurements are missing or stale: the
	// size was held (the ScalingActive condition).
	Active bool
	// Limited is true when min, max, a policy or pending workers held the
	// size back from the recommendation (the ScalingLimited condition),
	// with LimitReason and LimitMessage saying which: TooFewReplicas,
	// TooManyReplicas, ScaleUpLimit, ScaleDownLimit (the
	// HorizontalPodAutoscaler's), PendingWorkers, or ReversalBackoff (no
	// growth within the scale-down window after a scale-down).
	Limited                   bool
	LimitReason, LimitMessage string
}

// StaleStatusAfter is how old the job's newest heartbeat, or the newest
// throughput reading at its current size, may be for Decide to act on it.
// Sidecars write a member's status after its trainer's steps, at most once
// a second; 60 s allows for a slow step (twice a 30 s step of a large
// model) and a controller's resync, and is short enough that a job that
// stopped reporting is not scaled on what it did a minute ago.
const StaleStatusAfter = 60 * time.Second

// Decide decides the target's size from in. It is a pure function: the
// same input gives the same decision.
//
// The policy (recommend) grows the job by one unit while the unit's
// estimated marginal efficiency is at least the target and shrinks it by
// one when the last unit's is below it; then the HorizontalPodAutoscaler's
// behavior (stabilization windows and rate policies) bounds the change.
// The result is always within [min, max] and a multiple of the unit.
func Decide(in Input) Decision {
	p := paramsOf(in.Spec)
	if r := in.Spec.Replicas; r > 0 {
		return pinned(in, p, p.normalize(r))
	}
	cur := p.normalize(in.Current)
	if cur != in.Current {
		return outOfRange(in, p, cur)
	}
	return p.bound(in, recommend(in, p))
}

// params is a spec with its values brought into range: the schema's
// defaults and bounds, applied again so that an object the schema never
// saw still gets a sane decision.
type params struct {
	min, max, unit int32
	target         float64
	pendingTimeout time.Duration
	up, down       rules
}

func paramsOf(s v1alpha1.ElasticScalerSpec) params {
	p := params{unit: max(s.Unit, 1), target: s.TargetEfficiency, pendingTimeout: time.Duration(s.PendingTimeoutSeconds) * time.Second}
	p.min = roundUp(max(s.MinReplicas, 1), p.unit)
	p.max = max(roundDown(s.MaxReplicas, p.unit), p.min)
	if !(p.target > 0 && p.target <= 1) {
		p.target = 0.7
	}
	if p.pendingTimeout <= 0 {
		p.pendingTimeout = 120 * time.Second
	}
	p.up, p.down = behaviorRules(s.Behavior)
	return p
}

// normalize rounds n to the nearest multiple of the unit and clamps it
// into [min, max].
func (p params) normalize(n int32) int32 {
	r := (int64(n) + int64(p.unit)/2) / int64(p.unit) * int64(p.unit)
	return int32(max(int64(p.min), min(int64(p.max), r)))
}

func roundUp(n, unit int32) int32 {
	return int32((int64(n) + int64(unit) - 1) / int64(unit) * int64(unit))
}

func roundDown(n, unit int32) int32 { return n / unit * unit }

// outOfRange brings a target outside [min, max], or off the unit, into
// range at once, as the HorizontalPodAutoscaler does below minReplicas:
// no measurement or behavior is needed to know the size is wrong.
func outOfRange(in Input, p params, to int32) Decision {
	d := Decision{Desired: to, Recommendation: to, Reason: "ScaledUp", Active: in.HaveStatus && in.StatusAge <= StaleStatusAfter}
	if to < in.Current {
		d.Reason = "ScaledDown"
	}
	switch {
	case in.Current < p.min:
		d.Limited, d.LimitReason = true, "TooFewReplicas"
		d.LimitMessage = fmt.Sprintf("the target has %d replicas, fewer than minReplicas %d", in.Current, p.min)
	case in.Current > p.max:
		d.Limited, d.LimitReason = true, "TooManyReplicas"
		d.LimitMessage = fmt.Sprintf("the target has %d replicas, more than maxReplicas %d", in.Current, p.max)
	}
	d.Message = fmt.Sprintf("the target's %d replicas are outside [%d, %d] or not a multiple of unit %d: set to %d", in.Current, p.min, p.max, p.unit, to)
	if d.Limited {
		d.Message = d.LimitMessage + ": set to " + fmt.Sprint(to)
	}
	return d
}

// pinned keeps the target at spec.replicas, when not 0 (brought into range): what
// `kubectl scale` or a HorizontalPodAutoscaler asked for through the scale
// subresource. The goodput policy and the behavior stand aside, as they
// would for a workload whose replicas are set by hand.
func pinned(in Input, p params, to int32) Decision {
	d := Decision{Desired: to, Recommendation: to, Reason: ReasonSpecReplicas, Active: true}
	d.Message = fmt.Sprintf("spec.replicas asks for %d replicas (kubectl scale or a HorizontalPodAutoscaler); the goodput policy decides again once it is 0", to)
	if r := in.Spec.Replicas; r != to {
		d.Message = fmt.Sprintf("spec.replicas asks for %d replicas, brought into [%d, %d] in units of %d: %d", r, p.min, p.max, p.unit, to)
	}
	return d
}

// ReasonSpecReplicas: the size is spec.replicas', not the policy's.
const ReasonSpecReplicas = "SpecReplicas"

// proposal is the policy's recommendation before the behavior bounds it.
type proposal struct {
	replicas                  int32
	eff                       *float64
	reason, message           string
	inactive                  bool
	limitReason, limitMessage string
	// pending marks a shrink back to the workers that run: pods the
	// cluster cannot place are a fact, not a noisy reading, so the
	// scale-down window does not delay it.
	pending bool
}

// recommend is the goodput policy: what size the job should have, from
// what was measured, before the behavior bounds the change. in.Current is
// in range.
func recommend(in Input, p params) proposal {
	cur := in.Current
	hold := func(reason, format string, args ...any) proposal {
		return proposal{replicas: cur, reason: reason, message: fmt.Sprintf(format, args...)}
	}
	switch {
	case !in.HaveStatus:
		pr := hold("NoStatus", "the job has reported no status yet: holding %d replicas", cur)
		pr.inactive = true
		return pr
	case in.StatusAge > StaleStatusAfter:
		pr := hold("StaleStatus", "the job's newest heartbeat is %s old (more than %s): holding %d replicas", in.StatusAge.Round(time.Second), StaleStatusAfter, cur)
		pr.inactive = true
		return pr
	case in.Pending > 0 && in.PendingFor >= p.pendingTimeout:
		// The cluster has no room for more: stop asking for it, and do
		// not count on the pods that never came.
		runs := min(max(p.min, roundUp(max(in.Workers, 0), p.unit)), cur)
		pr := proposal{replicas: runs, reason: "PendingWorkers", pending: true, limitReason: "PendingWorkers"}
		pr.limitMessage = fmt.Sprintf("%d pods pending for %s (pendingTimeoutSeconds %d): not growing, desired back to the %d that run",
			in.Pending, in.PendingFor.Round(time.Second), int64(p.pendingTimeout/time.Second), runs)
		pr.message = pr.limitMessage
		return pr
	case in.Draining > 0:
		return hold("Draining", "%d members are draining: holding %d replicas until they have left", in.Draining, cur)
	case in.Pending > 0 || in.Workers != cur:
		// The measurements are not of the target's size yet.
		return hold("Resizing", "%d workers in the job, %d pods pending, the target has %d replicas: holding until the job has the target's size", in.Workers, in.Pending, cur)
	}
	if _, ok := currentThroughput(in); !ok {
		return hold("NoThroughput", "no positive throughput measured at %d workers in the last %s: holding", cur, StaleStatusAfter)
	}
	return byMarginalEfficiency(in, p)
}

// currentThroughput is the throughput history's entry at the job's current
// size, if it holds a positive reading taken within StaleStatusAfter:
// readings of zero are never recorded, so a job that stalls ages out here.
func currentThroughput(in Input) (v1alpha1.WorldSizeThroughput, bool) {
	for _, h := range in.Throughput {
		if h.WorldSize == in.Workers && finitePositive(h.SamplesPerSecond) && finitePositive(h.Goodput) {
			return h, in.Now.Sub(h.LastObservedTime.Time) <= StaleStatusAfter
		}
	}
	return v1alpha1.WorldSizeThroughput{}, false
}

// byMarginalEfficiency grows by a unit while its marginal efficiency is
// at least the target, shrinks by one when the last unit's is below it,
// and holds otherwise.
func byMarginalEfficiency(in Input, p params) proposal {
	cur, c := in.Current, newCurve(in.Throughput)
	n, u := float64(cur), float64(p.unit)
	up, okUp := c.marginal(n, u)
	last, okLast := 0.0, false
	if cur-p.unit >= 1 {
		last, okLast = c.marginal(n-u, u)
	}
	pr := proposal{replicas: cur, reason: "Hold"}
	switch {
	case okUp && up >= p.target:
		pr.eff = &up
		pr.message = fmt.Sprintf("one more unit of %d workers is estimated at %.2f marginal efficiency (target %.2f)", p.unit, up, p.target)
		if cur+p.unit > p.max {
			pr.limitReason, pr.limitMessage = "TooManyReplicas", fmt.Sprintf("%s, but the target is at maxReplicas %d", pr.message, p.max)
			return pr
		}
		pr.replicas = cur + p.unit
	case okLast && last < p.target:
		pr.eff = &last
		pr.message = fmt.Sprintf("the last unit of %d workers is at %.2f marginal efficiency (target %.2f)", p.unit, last, p.target)
		if cur-p.unit < p.min {
			pr.limitReason, pr.limitMessage = "TooFewReplicas", fmt.Sprintf("%s, but the target is at minReplicas %d", pr.message, p.min)
			return pr
		}
		pr.replicas = cur - p.unit
	case okUp:
		pr.eff = &up
		pr.message = fmt.Sprintf("holding %d replicas: one more unit is estimated at %.2f marginal efficiency, below the target %.2f", cur, up, p.target)
		if okLast {
			pr.message += fmt.Sprintf(", the last at %.2f", last)
		}
	default:
		pr.message = fmt.Sprintf("holding %d replicas: the measurements give no estimate of one more unit", cur)
	}
	return pr
}

// bound applies the behavior to the policy's proposal: the stabilization
// windows, no growth within the scale-down window of a scale-down, the
// rate policies, and the unit.
func (p params) bound(in Input, pr proposal) Decision {
	cur := in.Current
	d := Decision{Desired: cur, Recommendation: pr.replicas, Efficiency: pr.eff, Reason: pr.reason, Message: pr.message, Active: !pr.inactive}
	if pr.limitReason != "" {
		d.Limited, d.LimitReason, d.LimitMessage = true, pr.limitReason, pr.limitMessage
	}
	if pr.replicas == cur {
		return d
	}
	down := p.down
	if pr.pending {
		down.window = 0
	}
	desired := stabilize(in.Now, cur, pr.replicas, in.Recommendations, p.up, down)
	if desired == cur {
		d.Reason = "ScaleUpStabilized"
		d.Message = fmt.Sprintf("%s; a lower recommendation within the scale-up window (%s) holds %d replicas", pr.message, p.up.window, cur)
		if pr.replicas < cur {
			d.Reason = "ScaleDownStabilized"
			d.Message = fmt.Sprintf("%s; a higher recommendation within the scale-down window (%s) holds %d replicas", pr.message, p.down.window, cur)
		}
		return d
	}
	if desired > cur {
		// Growing again right after a shrink reverses a decision the
		// scale-down window took a whole window to make; wait for as
		// long, so the size changes direction at most once per window.
		if ago, shrunk := lastShrink(in); shrunk && ago < p.down.window {
			d.Reason, d.Limited, d.LimitReason = "Hold", true, "ReversalBackoff"
			d.LimitMessage = fmt.Sprintf("the target was scaled down %s ago: growth waits for the scale-down window (%s)", ago.Round(time.Second), p.down.window)
			d.Message = pr.message + "; " + d.LimitMessage
			return d
		}
	}
	if lim, reason, msg := rateLimit(in.Now, cur, desired, in.Changes, p.up, p.down); reason != "" {
		desired = lim
		d.Limited, d.LimitReason, d.LimitMessage = true, reason, msg
	}
	// Round towards the current size: a policy's limit is never exceeded
	// (one that allows less than a unit holds the size).
	if desired > cur {
		desired = roundDown(desired, p.unit)
	} else {
		desired = roundUp(desired, p.unit)
	}
	d.Desired = max(p.min, min(p.max, desired))
	switch {
	case d.Desired > cur:
		d.Reason = "ScaledUp"
	case d.Desired < cur:
		d.Reason = "ScaledDown"
	}
	return d
}

// lastShrink is how long ago the newest of in.Changes was, when it was a
// scale-down.
func lastShrink(in Input) (time.Duration, bool) {
	if len(in.Changes) == 0 {
		return 0, false
	}
	c := in.Changes[len(in.Changes)-1]
	return in.Now.Sub(c.Time), c.To < c.From
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
