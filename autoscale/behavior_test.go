package autoscale

import (
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/utils/ptr"
)

func TestBehaviorRulesDefaults(t *testing.T) {
	up, down := behaviorRules(nil)
	if up.window != 0 || down.window != 5*time.Minute || len(up.policies) != 2 || len(down.policies) != 1 ||
		up.sel != autoscalingv2.MaxChangePolicySelect || down.sel != autoscalingv2.MaxChangePolicySelect {
		t.Errorf("nil behavior: up %+v, down %+v; want the HorizontalPodAutoscaler's defaults", up, down)
	}
	// A part set keeps the rest of the defaults.
	b := &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](60)}}
	up, down = behaviorRules(b)
	if up.window != 0 || len(up.policies) != 2 || down.window != time.Minute || len(down.policies) != 1 || down.sel != autoscalingv2.MaxChangePolicySelect {
		t.Errorf("scale-down window only: up %+v, down %+v", up, down)
	}
}

func TestPolicyLimit(t *testing.T) {
	now := t0
	pods := func(v, p int32) autoscalingv2.HPAScalingPolicy {
		return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: v, PeriodSeconds: p}
	}
	pct := func(v, p int32) autoscalingv2.HPAScalingPolicy {
		return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: v, PeriodSeconds: p}
	}
	recent := []Change{{Time: now.Add(-10 * time.Second), From: 8, To: 10}}
	tests := []struct {
		name    string
		cur     int32
		r       rules
		changes []Change
		growing bool
		want    int32
	}{
		{"the defaults allow doubling", 10, defaultScaleUp, nil, true, 20},
		{"or 4 pods on a small target", 1, defaultScaleUp, nil, true, 5},
		{"Min picks the smaller change", 10, rules{policies: defaultScaleUp.policies, sel: autoscalingv2.MinChangePolicySelect}, nil, true, 14},
		{"a change within the period counts against it", 10, rules{policies: []autoscalingv2.HPAScalingPolicy{pods(4, 60)}, sel: autoscalingv2.MaxChangePolicySelect}, recent, true, 12},
		{"a change before the period does not", 10, rules{policies: []autoscalingv2.HPAScalingPolicy{pods(4, 5)}, sel: autoscalingv2.MaxChangePolicySelect}, recent, true, 14},
		{"percent up rounds up", 3, rules{policies: []autoscalingv2.HPAScalingPolicy{pct(10, 60)}, sel: autoscalingv2.MaxChangePolicySelect}, nil, true, 4},
		{"percent down rounds down", 10, rules{policies: []autoscalingv2.HPAScalingPolicy{pct(15, 60)}, sel: autoscalingv2.MaxChangePolicySelect}, nil, false, 8},
		{"Max down picks the largest cut", 10, rules{policies: []autoscalingv2.HPAScalingPolicy{pct(50, 60), pods(2, 60)}, sel: autoscalingv2.MaxChangePolicySelect}, nil, false, 5},
		{"Min down picks the smallest cut", 10, rules{policies: []autoscalingv2.HPAScalingPolicy{pct(50, 60), pods(2, 60)}, sel: autoscalingv2.MinChangePolicySelect}, nil, false, 8},
		{"a scale-down within the period counts against the next one", 10, rules{policies: []autoscalingv2.HPAScalingPolicy{pods(1, 60)}, sel: autoscalingv2.MaxChangePolicySelect},
			[]Change{{Time: now.Add(-10 * time.Second), From: 12, To: 10}}, false, 11},
		{"Disabled allows no change", 10, rules{policies: defaultScaleUp.policies, sel: autoscalingv2.DisabledPolicySelect}, nil, true, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := policyLimit(now, tt.cur, tt.changes, tt.r, tt.growing); got != tt.want {
				t.Errorf("limit %d, want %d", got, tt.want)
			}
		})
	}
}

func TestStabilize(t *testing.T) {
	now := t0
	up, down := rules{window: time.Minute}, rules{window: 5 * time.Minute}
	past := []Recommendation{{Time: now.Add(-4 * time.Minute), Replicas: 9}, {Time: now.Add(-30 * time.Second), Replicas: 6}}
	for _, tt := range []struct {
		name           string
		cur, rec, want int32
	}{
		{"growth stops at the lowest recommendation of the scale-up window", 5, 8, 6},
		{"a shrink stops at the highest recommendation of the scale-down window", 8, 4, 8},
		{"the current size stays", 7, 7, 7},
	} {
		if got := stabilize(now, tt.cur, tt.rec, past, up, down); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}
