package autoscale

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// KueueAdmissionGate is the scheduling gate Kueue holds a workload's pods
// behind until it admits the workload.
const KueueAdmissionGate = "kueue.x-k8s.io/admission"

// Reasons of the Suspended condition and its Events.
const (
	// ReasonSuspended: a queue suspended the target or holds its pods.
	ReasonSuspended = "Suspended"
	// ReasonResumed: the Event of a target that a queue let go again.
	ReasonResumed = "Resumed"
)

// suspension says why a queue holds the target, "" when none does: the
// target's spec.suspend (a batch/v1 Job, a JobSet) or spec.runPolicy.suspend
// (a Kubeflow job) is true, as Kueue sets them until it admits the
// workload (and again when it preempts it), or every pod of the target
// waits behind Kueue's admission gate (Kueue's pod integration). A target
// the controller cannot read is not suspended: reading its scale reports
// what is wrong.
func (s *scalerSync) suspension(ctx context.Context) string {
	es, c := s.es, s.c
	ref := es.Spec.ScaleTargetRef
	resources, err := c.targetResources(ctx, ref.APIVersion, ref.Kind)
	if err != nil || len(resources) == 0 {
		return ""
	}
	target, err := c.deps.Dynamic.Resource(resources[0]).Namespace(es.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		c.log.Debug("cannot read the target for its suspension", "scaler", s.key, "err", err)
		return ""
	}
	for _, path := range [][]string{{"spec", "suspend"}, {"spec", "runPolicy", "suspend"}} {
		if v, found, _ := unstructured.NestedBool(target.Object, path...); found && v {
			return fmt.Sprintf("%s %s/%s is suspended (%s is true): a queue holds it", ref.Kind, es.Namespace, ref.Name, strings.Join(path, "."))
		}
	}
	if n := gatedPods(c.podInformer.GetIndexer(), target); n > 0 {
		return fmt.Sprintf("all %d pods of %s %s/%s wait for Kueue's admission (scheduling gate %s)", n, ref.Kind, es.Namespace, ref.Name, KueueAdmissionGate)
	}
	return ""
}

// gatedPods is the number of target's pods (by its spec.selector) when
// every one of them waits behind KueueAdmissionGate, else 0.
func gatedPods(pods cache.Indexer, target *unstructured.Unstructured) int {
	sel, err := specSelector(target)
	if err != nil || sel == nil || sel.Empty() {
		return 0
	}
	n, all := 0, true
	_ = cache.ListAllByNamespace(pods, target.GetNamespace(), sel, func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil {
			return
		}
		n++
		if !slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == KueueAdmissionGate }) {
			all = false
		}
	})
	if !all {
		return 0
	}
	return n
}

// suspended records the target's suspension: the Suspended condition
// (and an Event as it turns true), or, once the queue lets the target go,
// the condition removed and a Resumed Event. It reports whether the
// target is suspended.
func (s *scalerSync) suspended(why string) bool {
	if why != "" {
		s.condition(v1alpha1.Suspended, metav1.ConditionTrue, ReasonSuspended, why+"; the controller neither scales it nor reads its job until it resumes", corev1.EventTypeNormal)
		return true
	}
	if meta.FindStatusCondition(s.es.Status.Conditions, v1alpha1.Suspended) != nil {
		meta.RemoveStatusCondition(&s.es.Status.Conditions, v1alpha1.Suspended)
		s.c.events.Event(s.u, corev1.EventTypeNormal, ReasonResumed, "the queue let the target go: the controller scales it again")
	}
	return false
}
