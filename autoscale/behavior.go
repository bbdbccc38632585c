package autoscale

import (
	"fmt"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// rules is one direction's behavior with the HorizontalPodAutoscaler's
// defaults filled in.
type rules struct {
	window   time.Duration
	policies []autoscalingv2.HPAScalingPolicy
	sel      autoscalingv2.ScalingPolicySelect
}

// The HorizontalPodAutoscaler's defaults: scale up at once, by up to
// 100 % or 4 pods per 15 s, whichever is more; scale down on the highest
// recommendation of the last 5 minutes, by up to 100 % per 15 s.
var (
	defaultScaleUp = rules{
		window: 0,
		policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
		sel: autoscalingv2.MaxChangePolicySelect,
	}
	defaultScaleDown = rules{
		window:   300 * time.Second,
		policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
		sel:      autoscalingv2.MaxChangePolicySelect,
	}
)

// behaviorRules returns b's scale-up and scale-down rules, each part left
// out taken from the defaults, as the API server defaults a
// HorizontalPodAutoscaler's. An empty policy list counts as left out (the
// HorizontalPodAutoscaler's validation rejects it).
func behaviorRules(b *autoscalingv2.HorizontalPodAutoscalerBehavior) (up, down rules) {
	if b == nil {
		return defaultScaleUp, defaultScaleDown
	}
	return withDefaults(b.ScaleUp, defaultScaleUp), withDefaults(b.ScaleDown, defaultScaleDown)
}

func withDefaults(r *autoscalingv2.HPAScalingRules, def rules) rules {
	if r == nil {
		return def
	}
	if r.StabilizationWindowSeconds != nil {
		def.window = time.Duration(max(*r.StabilizationWindowSeconds, 0)) * time.Second
	}
	if len(r.Policies) > 0 {
		def.policies = r.Policies
	}
	if r.SelectPolicy != nil {
		def.sel = *r.SelectPolicy
	}
	return def
}

// stabilize bounds recommendation rec by the recommendations of the
// windows, as the HorizontalPodAutoscaler does: the size only rises to
// the lowest recommendation of the scale-up window and only falls to the
// highest of the scale-down window, so a recommendation must hold for a
// whole window before it acts. A reading that dips for one sync cannot
// shrink the job.
func stabilize(now time.Time, cur, rec int32, past []Recommendation, up, down rules) int32 {
	upRec, downRec := rec, rec
	for _, r := range past {
		if r.Time.After(now.Add(-up.window)) {
			upRec = min(upRec, r.Replicas)
		}
		if r.Time.After(now.Add(-down.window)) {
			downRec = max(downRec, r.Replicas)
		}
	}
	return min(max(cur, upRec), downRec)
}

// rateLimit bounds desired by the policies of its direction over the
// changes of their periods, as the HorizontalPodAutoscaler does: each
// policy allows a size relative to the size at the start of its period
// (the current size less what the period added, plus what it removed);
// selectPolicy Max takes the policy that allows the biggest change, Min
// the smallest, Disabled none. It returns the bounded size and, when it
// bounded it, HorizontalPodAutoscaler's reason and a message.
func rateLimit(now time.Time, cur, desired int32, changes []Change, up, down rules) (int32, string, string) {
	switch {
	case desired > cur:
		limit := policyLimit(now, cur, changes, up, true)
		if limit < desired {
			return max(limit, cur), "ScaleUpLimit", fmt.Sprintf("the scale-up policies allow %d replicas now", max(limit, cur))
		}
	case desired < cur:
		limit := policyLimit(now, cur, changes, down, false)
		if limit > desired {
			return min(limit, cur), "ScaleDownLimit", fmt.Sprintf("the scale-down policies allow %d replicas now", min(limit, cur))
		}
	}
	return desired, "", ""
}

// policyLimit is the most (growing) or fewest (shrinking) replicas r's
// policies allow now.
func policyLimit(now time.Time, cur int32, changes []Change, r rules, growing bool) int32 {
	if r.sel == autoscalingv2.DisabledPolicySelect {
		return cur
	}
	// Max picks the largest change: the highest limit growing, the lowest
	// shrinking; Min the other way round.
	pickHigh := (r.sel != autoscalingv2.MinChangePolicySelect) == growing
	var limit int32
	for i, p := range r.policies {
		added, removed := changedWithin(now, time.Duration(p.PeriodSeconds)*time.Second, changes)
		start := float64(cur) - added + removed
		var l float64
		switch {
		case p.Type == autoscalingv2.PodsScalingPolicy && growing:
			l = start + float64(p.Value)
		case p.Type == autoscalingv2.PodsScalingPolicy:
			l = start - float64(p.Value)
		case growing: // percent, rounded up so a small target still grows
			l = math.Ceil(start * (1 + float64(p.Value)/100))
		default:
			l = math.Floor(start * (1 - float64(p.Value)/100))
		}
		l32 := int32(max(math.MinInt32, min(math.MaxInt32, l)))
		if i == 0 || (pickHigh && l32 > limit) || (!pickHigh && l32 < limit) {
			limit = l32
		}
	}
	return limit
}

// changedWithin sums the replicas added and removed by the changes of the
// last period.
func changedWithin(now time.Time, period time.Duration, changes []Change) (added, removed float64) {
	for _, c := range changes {
		if !c.Time.After(now.Add(-period)) {
			continue
		}
		if d := float64(c.To) - float64(c.From); d > 0 {
			added += d
		} else {
			removed -= d
		}
	}
	return added, removed
}
