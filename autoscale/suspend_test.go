package autoscale

import (
	"context"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// job is a batch/v1 Job of parallelism 2 selecting app=name.
func job(name string, suspend bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": name, "namespace": testNS, "resourceVersion": "1"},
		"spec": map[string]any{
			"parallelism": int64(2), "suspend": suspend,
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
		},
		"status": map[string]any{"active": int64(2)},
	}}
	return u
}

// A Job that a queue suspends is neither scaled nor read as failing: the
// scaler shows Suspended (an Event as it turns so), and once the queue
// lets it go, a Resumed Event, and its parallelism is its size again.
func TestASuspendedJobIsNeitherScaledNorFailing(t *testing.T) {
	etcd := startEtcd(t)
	f := newFixture(t, etcd, scaler("queued", func(es *v1alpha1.ElasticScaler) {
		es.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "batch/v1", Kind: "Job", Name: "queued-workers"}
		es.Spec.MinReplicas, es.Spec.Replicas = 1, 3
	}))
	f.c.deps.Mapper.(staticMapper)[schema.GroupKind{Group: "batch", Kind: "Job"}] = jobsResource
	jobs := f.dyn.Resource(jobsResource).Namespace(testNS)
	if _, err := jobs.Create(context.Background(), job("queued-workers", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("queued"); err != nil {
		t.Fatal(err)
	}
	es := f.stored("queued")
	wantCondition(t, es, v1alpha1.Suspended, metav1.ConditionTrue, ReasonSuspended, "Job team/queued-workers is suspended (spec.suspend is true)")
	if es.Status.Phase != v1alpha1.PhaseSuspended || condition(es, v1alpha1.JobStopped) != nil || condition(es, v1alpha1.ScalingActive) != nil {
		t.Fatalf("status %+v, want phase Suspended and nothing read of the job", es.Status)
	}
	if ev := f.drainEvents(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal Suspended") {
		t.Fatalf("events %q, want one Suspended", ev)
	}
	before := f.writes()
	if err := f.sync("queued"); err != nil {
		t.Fatal(err)
	}
	if after := f.writes(); after != before {
		t.Fatalf("a second sync of the suspended Job wrote: %+v -> %+v", before, after)
	}

	// Resumed: the size (spec.replicas 3) goes to the Job's parallelism.
	if _, err := jobs.Patch(context.Background(), "queued-workers", types.MergePatchType, []byte(`{"spec":{"suspend":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("queued"); err != nil {
		t.Fatal(err)
	}
	es = f.stored("queued")
	if condition(es, v1alpha1.Suspended) != nil || es.Status.Phase == v1alpha1.PhaseSuspended {
		t.Fatalf("status %+v after the resume, want no Suspended", es.Status)
	}
	if ev := f.drainEvents(); len(ev) < 1 || !strings.HasPrefix(ev[0], "Normal Resumed") {
		t.Fatalf("events %q, want Resumed first", ev)
	}
	got, err := jobs.Get(context.Background(), "queued-workers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := unstructured.NestedInt64(got.Object, "spec", "parallelism"); p != 3 {
		t.Fatalf("the Job's parallelism %d, want 3 (the scaler's replicas)", p)
	}
}

// Pods that all wait behind Kueue's admission gate are a suspension too;
// one pod let through ends it.
func TestPodsHeldByKueuesGateAreASuspension(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "gated", 1, worker{id: "w0", samplesPerSec: 100})
	f := newFixture(t, etcd, scaler("gated"))
	f.target("gated-workers", 2)
	sts := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": "gated-workers", "namespace": testNS},
		"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "gated-workers"}}},
	}}
	if err := f.dyn.Tracker().Add(sts); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, gated bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{"app": "gated-workers"}}}
		if gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: KueueAdmissionGate}}
		}
		return p
	}
	f.cachePod(pod("gated-workers-0", true))
	f.cachePod(pod("gated-workers-1", true))
	if err := f.sync("gated"); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, f.stored("gated"), v1alpha1.Suspended, metav1.ConditionTrue, ReasonSuspended, "all 2 pods of StatefulSet team/gated-workers wait for Kueue's admission")
	f.cachePod(pod("gated-workers-1", false))
	if err := f.sync("gated"); err != nil {
		t.Fatal(err)
	}
	if c := condition(f.stored("gated"), v1alpha1.Suspended); c != nil {
		t.Fatalf("Suspended %+v with a pod admitted, want none", c)
	}
}
