package autoscale

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// pendingPods counts the pods of namespace matched by selector (a scale's
// status.selector) that the scheduler could not place, and how long the
// oldest of them has waited at now. An empty selector matches none: a
// target whose scale names no selector has no pods the controller can see.
func pendingPods(pods corelisters.PodLister, namespace, selector string, now time.Time) (n int32, oldest time.Duration, err error) {
	if selector == "" {
		return 0, 0, nil
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return 0, 0, fmt.Errorf("the target's selector %q: %w", selector, err)
	}
	list, err := pods.Pods(namespace).List(sel)
	if err != nil {
		return 0, 0, fmt.Errorf("list pods: %w", err)
	}
	for _, p := range list {
		since, ok := unschedulableSince(p)
		if !ok {
			continue
		}
		n++
		oldest = max(oldest, now.Sub(since))
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
		if !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time, true
		}
		return p.CreationTimestamp.Time, true
	}
	return time.Time{}, false
}
