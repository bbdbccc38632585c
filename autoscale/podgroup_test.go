package autoscale

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

var coschedulingGroups = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

// Where a gang scheduler's PodGroup is served, the job has one of
// minMember min, kept in step; a group of that name the scaler does not
// own is reported, not taken over; where none is served, nothing is
// written.
func TestTheJobsPodGroupIsKeptWhereItsKindIsServed(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "gang", 1, worker{id: "w0", samplesPerSec: 100})
	f := newFixture(t, etcd, scaler("gang", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas = 2 }))
	f.target("gang-workers", 2)
	if err := f.sync("gang"); err != nil {
		t.Fatal(err)
	}
	groups := f.dyn.Resource(coschedulingGroups).Namespace(testNS)
	if _, err := groups.Get(context.Background(), "gang", metav1.GetOptions{}); err == nil {
		t.Fatal("a PodGroup was written where no gang scheduler's kind is served")
	}

	f.c.deps.Mapper.(staticMapper)[schema.GroupKind{Group: "scheduling.x-k8s.io", Kind: "PodGroup"}] = coschedulingGroups
	if err := f.sync("gang"); err != nil {
		t.Fatal(err)
	}
	minMember := func() int64 {
		t.Helper()
		pg, err := groups.Get(context.Background(), "gang", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if o := metav1.GetControllerOf(pg); o == nil || o.UID != "uid-gang" {
			t.Fatalf("the PodGroup's controller is %+v, want the ElasticScaler", o)
		}
		n, _, _ := unstructured.NestedInt64(pg.Object, "spec", "minMember")
		return n
	}
	if n := minMember(); n != 2 {
		t.Fatalf("minMember %d, want 2", n)
	}
	f.cache(scaler("gang", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas = 1 }))
	if err := f.sync("gang"); err != nil {
		t.Fatal(err)
	}
	if n := minMember(); n != 1 {
		t.Fatalf("minMember %d after min went to 1, want 1", n)
	}

	// Someone else's group of the job's name.
	other := &unstructured.Unstructured{}
	other.SetAPIVersion("scheduling.x-k8s.io/v1alpha1")
	other.SetKind("PodGroup")
	other.SetName("theirs")
	if _, err := groups.Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := scaler("theirs-scaler", func(es *v1alpha1.ElasticScaler) { es.Spec.Job.Name = "theirs" })
	if err := f.dyn.Tracker().Add(second); err != nil {
		t.Fatal(err)
	}
	f.cache(second)
	f.target("theirs-scaler-workers", 1)
	if err := f.sync("theirs-scaler"); err == nil || !strings.Contains(err.Error(), "is not this ElasticScaler's") {
		t.Fatalf("sync over another's PodGroup: %v, want it named", err)
	}
	wantCondition(t, f.stored("theirs-scaler"), v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedPodGroup, "PodGroup named theirs exists")
}
