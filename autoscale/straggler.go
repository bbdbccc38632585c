package autoscale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/jobstatus"
)

// Reasons of the straggler Events.
const (
	// ReasonStraggler: the job's leader names a worker a straggler.
	ReasonStraggler = "Straggler"
	// ReasonStragglerReplaced: policy replace tainted the straggler's
	// node and deleted its pod.
	ReasonStragglerReplaced = "StragglerReplaced"
	// ReasonFailedReplace: the taint or the deletion failed (tried again
	// at the next sync).
	ReasonFailedReplace = "FailedStragglerReplace"
)

// StragglerTaintKey is the taint (value: the job, effect NoSchedule) that
// policy replace puts on a straggler's node, so that the pod recreated in
// its place, and any other pod that does not tolerate it, lands elsewhere.
// It stays until someone removes it (kubectl taint nodes NODE
// ringside.dev/straggler-) after looking at the node.
const StragglerTaintKey = "ringside.dev/straggler"

// findings remembers, per ElasticScaler, the findings whose Event is
// recorded, so that a finding is one Event however many syncs see it.
type findings struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time // scaler key -> member -> the finding's time
}

// news returns the findings of snap not seen yet for key, and forgets
// the ones gone.
func (f *findings) news(key string, snap jobstatus.Snapshot) []jobstatus.Straggler {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]map[string]time.Time{}
	}
	prev := f.seen[key]
	cur := make(map[string]time.Time, len(snap.Stragglers))
	var out []jobstatus.Straggler
	for _, s := range snap.Stragglers {
		cur[s.Member] = s.Time
		if t, ok := prev[s.Member]; !ok || !t.Equal(s.Time) {
			out = append(out, s)
		}
	}
	if len(cur) == 0 {
		delete(f.seen, key)
	} else {
		f.seen[key] = cur
	}
	return out
}

// unsee forgets that the finding of member was handled, so that the next
// sync tries it again.
func (f *findings) unsee(key, member string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.seen[key], member)
}

// stragglers records an Event for each new finding of the job's leader,
// on the ElasticScaler and on the worker's pod, and with policy replace
// replaces the worker: its node is tainted, then its pod deleted (the
// sidecar drains on SIGTERM, so the job loses no step and trains at one
// worker less until the pod is back), where the leader found the job
// would stay at or above its min world size without it. Only a pod older
// than the finding is deleted: the one recreated in its place never is.
func (s *scalerSync) stragglers(ctx context.Context, snap jobstatus.Snapshot) error {
	policy := v1alpha1.StragglerReport
	if p := s.es.Spec.Straggler; p != nil && p.Policy != "" {
		policy = p.Policy
	}
	var errs []error
	for _, f := range s.c.findings.news(s.key, snap) {
		msg := fmt.Sprintf("job %s's leader names worker %s a straggler: it computes %.2fx the ring's median (%.3fs against %.3fs per step) since step %d",
			s.jobName(), f.Member, f.Ratio(), f.ComputeTimeS, f.MedianComputeTimeS, f.SinceStep)
		if f.Node != "" {
			msg += " on node " + f.Node
		}
		pod := s.pod(f.Member)
		s.c.events.Event(s.u, corev1.EventTypeWarning, ReasonStraggler, msg)
		if pod != nil {
			s.c.events.Event(pod, corev1.EventTypeWarning, ReasonStraggler, msg)
		}
		if policy != v1alpha1.StragglerReplace {
			continue
		}
		if !f.Replaceable {
			s.c.events.Event(s.u, corev1.EventTypeNormal, ReasonStraggler, "not replacing "+f.Member+": the job would fall below its min world size without it")
			continue
		}
		if pod == nil || pod.DeletionTimestamp != nil || !pod.CreationTimestamp.Time.Before(f.Time) {
			continue // gone already, going, or its replacement
		}
		if err := s.replace(ctx, pod); err != nil {
			s.c.findings.unsee(s.key, f.Member)
			msg := fmt.Sprintf("cannot replace straggler %s: %v", f.Member, err)
			s.c.events.Event(s.u, corev1.EventTypeWarning, ReasonFailedReplace, msg)
			errs = append(errs, errors.New(msg))
			continue
		}
		msg = fmt.Sprintf("replaced straggler %s: node %s tainted %s=%s:NoSchedule, pod deleted (it drains first); its workload recreates it on another node",
			f.Member, pod.Spec.NodeName, StragglerTaintKey, s.es.Spec.Job.Name)
		s.c.events.Event(s.u, corev1.EventTypeNormal, ReasonStragglerReplaced, msg)
		s.c.events.Event(pod, corev1.EventTypeNormal, ReasonStragglerReplaced, msg)
	}
	return errors.Join(errs...)
}

// pod returns the cached pod of member (the sidecar's member id is its
// pod's name), with its kind set for an Event; nil when there is none.
func (s *scalerSync) pod(member string) *corev1.Pod {
	obj, ok, err := s.c.podInformer.GetIndexer().GetByKey(s.es.Namespace + "/" + member)
	pod, isPod := obj.(*corev1.Pod)
	if err != nil || !ok || !isPod {
		return nil
	}
	pod = pod.DeepCopy() // the cache's objects carry no kind, which the Event names
	pod.APIVersion, pod.Kind = "v1", "Pod"
	return pod
}

// replace taints pod's node and deletes pod (gracefully, this very pod).
func (s *scalerSync) replace(ctx context.Context, pod *corev1.Pod) error {
	if node := pod.Spec.NodeName; node != "" && s.c.deps.Nodes != nil {
		if err := s.taint(ctx, node); err != nil {
			return fmt.Errorf("taint node %s: %w", node, err)
		}
	}
	uid := pod.UID
	err := s.c.deps.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

// taint adds the straggler taint of this job to node, once.
func (s *scalerSync) taint(ctx context.Context, name string) error {
	nodes := s.c.deps.Nodes
	for range 3 { // a conflict is another writer of the node: read it again
		node, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// The job's name: a taint's value is a label value, with no '/'.
		taint := corev1.Taint{Key: StragglerTaintKey, Value: s.es.Spec.Job.Name, Effect: corev1.TaintEffectNoSchedule}
		for _, t := range node.Spec.Taints {
			if t.MatchTaint(&taint) {
				return nil
			}
		}
		node.Spec.Taints = append(node.Spec.Taints, taint)
		if _, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return errors.New("the node kept changing under the update")
}
