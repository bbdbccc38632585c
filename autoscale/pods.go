package autoscale

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// pendingPods counts the pods of namespace matched by selector (a scale's
// status.selector) that the scheduler could not place, and how long the
// oldest of them has waited at now. An empty selector matches none: a
// target whose scale names no selector has no pods the controller can see.
func pendingPods(pods cache.Indexer, namespace, selector string, now time.Time) (n int32, oldest time.Duration, err error) {
	if selector == "" {
		return 0, 0, nil
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return 0, 0, fmt.Errorf("the target's selector %q: %w", selector, err)
	}
	err = cache.ListAllByNamespace(pods, namespace, sel, func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if since, ok := unschedulableSince(p); ok {
			n++
			oldest = max(oldest, now.Sub(since))
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("list pods: %w", err)
	}
	return n, oldest, nil
}

// unschedulableSince reports whether p is Pending because the scheduler
// could not place it, and since when: its PodScheduled condition's last
// transition, or its creation when the condition carries no time.
func unschedulableSince(p *corev1.Pod) (time.Time, bool) {
	if p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse {
			continue
		}
		if c.Reason == corev1.PodReasonSchedulingGated {
			// Held on purpose (a queue's admission gate), not unplaceable.
			return time.Time{}, false
		}
		if !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time, true
		}
		return p.CreationTimestamp.Time, true
	}
	return time.Time{}, false
}
