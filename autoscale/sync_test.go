package autoscale

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/internal/etcdtest"
)

func TestATargetWithoutAScaleIsNotAbleToScale(t *testing.T) {
	etcd := startEtcd(t)
	tests := []struct {
		name    string
		ref     autoscalingv2.CrossVersionObjectReference
		wantMsg string
	}{
		{"a kind without a scale subresource", autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}, `cannot get the scale of ConfigMap team/settings`},
		{"a target that does not exist", autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "gone"}, `statefulsets.apps "gone" not found`},
		{"a kind the API server does not serve", autoscalingv2.CrossVersionObjectReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w"}, "no resource of kind Widget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, etcd, scaler("job", func(es *v1alpha1.ElasticScaler) { es.Spec.ScaleTargetRef = tt.ref }))
			if err := f.sync("job"); err == nil {
				t.Fatal("sync = nil, want an error so the key is retried with back-off")
			}
			es := f.stored("job")
			wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedGetScale, tt.wantMsg)
			if ev := f.drainEvents(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning FailedGetScale") {
				t.Fatalf("events %q, want one FailedGetScale warning", ev)
			}
			before := f.writes()
			if err := f.sync("job"); err == nil {
				t.Fatal("second sync = nil, want the error again")
			}
			if after := f.writes(); after != before {
				t.Fatalf("a second failing sync wrote: %+v -> %+v (want no status write and no new Event)", before, after)
			}
		})
	}
}

func TestATargetThatAppearsLaterIsAbleToScaleAgain(t *testing.T) {
	f := newFixture(t, startEtcd(t), scaler("late"))
	if err := f.sync("late"); err == nil {
		t.Fatal("sync of a missing target = nil, want an error")
	}
	f.target("late-workers", 2)
	if err := f.sync("late"); err != nil {
		t.Fatal(err)
	}
	es := f.stored("late")
	wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale, "")
	if es.Status.CurrentReplicas != 2 {
		t.Fatalf("current replicas %d, want 2", es.Status.CurrentReplicas)
	}
}

func TestAJobWithoutStatusHoldsTheSize(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "nogen", 0, worker{id: "w0", none: true})
	seedJob(t, etcd, "silent", 1, worker{id: "w0", none: true}, worker{id: "w1", none: true})
	for _, job := range []string{"nokeys", "nogen", "silent"} {
		t.Run(job, func(t *testing.T) {
			f := newFixture(t, etcd, scaler(job))
			f.target(job+"-workers", 3)
			if err := f.sync(job); err != nil {
				t.Fatal(err)
			}
			if n := f.targetReplicas(job + "-workers"); n != 3 {
				t.Fatalf("target resized to %d, want held at 3", n)
			}
			es := f.stored(job)
			if es.Status.CurrentReplicas != 3 || es.Status.DesiredReplicas != 3 || es.Status.LastScaleTime != nil {
				t.Fatalf("status %+v, want current = desired = 3 and no scale time", es.Status)
			}
			wantCondition(t, es, v1alpha1.ScalingActive, metav1.ConditionFalse, condition(es, v1alpha1.ScalingActive).Reason, "")
			wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale, "")
			if w := f.writes(); w.scale != 0 || w.events != 0 {
				t.Fatalf("writes %+v, want no scale update and no Event", w)
			}
		})
	}
}

func TestADecisionThatChangesTheSizeRescalesOnceAndRecordsIt(t *testing.T) {
	etcd := startEtcd(t)
	// Below min: every policy raises it to min.
	f := newFixture(t, etcd, scaler("grow", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas = 2 }))
	f.target("grow-workers", 1)
	if err := f.sync("grow"); err != nil {
		t.Fatal(err)
	}
	if n := f.targetReplicas("grow-workers"); n != 2 {
		t.Fatalf("target at %d, want 2", n)
	}
	ev := f.drainEvents()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal SuccessfulRescale New size: 1 -> 2; reason: ") {
		t.Fatalf("events %q, want one SuccessfulRescale from 1 to 2", ev)
	}
	es := f.stored("grow")
	if es.Status.CurrentReplicas != 2 || es.Status.DesiredReplicas != 2 || es.Status.LastScaleTime == nil || es.Status.ObservedGeneration != 1 {
		t.Fatalf("status %+v, want current = desired = 2, a scale time and observed generation 1", es.Status)
	}
	wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale, "")
	if got := testutil.ToFloat64(f.c.metrics.scaleEvents.WithLabelValues("up")); got != 1 {
		t.Errorf("scale events up = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.c.metrics.desired.WithLabelValues(testNS, "grow")); got != 2 {
		t.Errorf("desired replicas gauge = %v, want 2", got)
	}

	// The next sync records that the job is catching up with the new
	// size; the one after it has nothing new.
	f.clock.SetTime(f.clock.Now().Add(15 * time.Second))
	if err := f.sync("grow"); err != nil {
		t.Fatal(err)
	}
	before := f.writes()
	f.clock.SetTime(f.clock.Now().Add(15 * time.Second))
	if err := f.sync("grow"); err != nil {
		t.Fatal(err)
	}
	if after := f.writes(); after != before {
		t.Fatalf("a second sync with nothing new wrote: %+v -> %+v", before, after)
	}
}

func TestAFailedRescaleIsAnEventAndACondition(t *testing.T) {
	etcd := startEtcd(t)
	f := newFixture(t, etcd, scaler("stuck", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas = 3 }))
	f.target("stuck-workers", 1)
	f.scales.PrependReactor("update", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "stuck-workers", errors.New("no RBAC"))
	})
	if err := f.sync("stuck"); err == nil {
		t.Fatal("sync = nil, want the update's error")
	}
	ev := f.drainEvents()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning FailedRescale New size: 1 -> 3") {
		t.Fatalf("events %q, want one FailedRescale", ev)
	}
	wantCondition(t, f.stored("stuck"), v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedUpdateScale, "forbidden")
}

func TestAMeasurementIsFoldedOnceFromACompleteGeneration(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "steady", 4, worker{id: "w0", samplesPerSec: 100}, worker{id: "w1", samplesPerSec: 120, age: time.Second})
	seedJob(t, etcd, "resizing", 5, worker{id: "w0", samplesPerSec: 100}, worker{id: "w1", samplesPerSec: 90, beatGen: 4})
	seedJob(t, etcd, "stale", 2, worker{id: "w0", samplesPerSec: 100}, worker{id: "w1", samplesPerSec: 90, age: time.Minute})

	f := newFixture(t, etcd, scaler("steady"), scaler("resizing"), scaler("stale"))
	for _, job := range []string{"steady", "resizing", "stale"} {
		f.target(job+"-workers", 2)
		if err := f.sync(job); err != nil {
			t.Fatalf("%s: %v", job, err)
		}
	}
	es := f.stored("steady")
	if len(es.Status.Throughput) != 1 {
		t.Fatalf("steady throughput %+v, want one world size", es.Status.Throughput)
	}
	th := es.Status.Throughput[0]
	if th.WorldSize != 2 || th.SamplesPerSecond != 220 || th.LastObservedTime.IsZero() {
		t.Fatalf("steady throughput %+v, want world size 2 at 220 samples/s", th)
	}
	wantCondition(t, es, v1alpha1.ScalingActive, metav1.ConditionTrue, condition(es, v1alpha1.ScalingActive).Reason, "")
	for _, job := range []string{"resizing", "stale"} {
		if th := f.stored(job).Status.Throughput; len(th) != 0 {
			t.Errorf("%s: throughput %+v, want none measured", job, th)
		}
	}

	// The policy may have resized the target: the next sync records
	// that the job is catching up; the one after it has nothing new.
	if err := f.sync("steady"); err != nil {
		t.Fatal(err)
	}
	before := f.writes()
	if err := f.sync("steady"); err != nil {
		t.Fatal(err)
	}
	if after := f.writes(); after != before {
		t.Fatalf("a sync with the same heartbeats wrote: %+v -> %+v", before, after)
	}
}

func TestPendingPodsOfTheTargetAreCounted(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	pod := func(name, app string, phase corev1.PodPhase, scheduled corev1.ConditionStatus, since time.Time) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{"app": app}}}
		p.Status.Phase = phase
		if scheduled != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: scheduled, Reason: "Unschedulable", LastTransitionTime: metav1.NewTime(since)}}
		}
		return p
	}
	f := newFixture(t, startEtcd(t))
	for _, p := range []*corev1.Pod{
		pod("a-0", "a", corev1.PodRunning, corev1.ConditionTrue, now),
		pod("a-1", "a", corev1.PodPending, corev1.ConditionFalse, now.Add(-90*time.Second)),
		pod("a-2", "a", corev1.PodPending, corev1.ConditionFalse, now.Add(-10*time.Second)),
		pod("a-3", "a", corev1.PodPending, "", now), // not yet seen by the scheduler
		pod("b-0", "b", corev1.PodPending, corev1.ConditionFalse, now.Add(-time.Hour)),
	} {
		f.cachePod(p)
	}
	// Held by a queue's scheduling gate: waiting on purpose, not unplaceable.
	gated := pod("a-4", "a", corev1.PodPending, corev1.ConditionFalse, now.Add(-time.Hour))
	gated.Status.Conditions[0].Reason = corev1.PodReasonSchedulingGated
	f.cachePod(gated)
	n, oldest, err := pendingPods(f.c.podInformer.GetIndexer(), testNS, "app=a", now)
	if err != nil || n != 2 || oldest != 90*time.Second {
		t.Fatalf("pendingPods = %d, %s, %v; want 2, 1m30s", n, oldest, err)
	}
	if _, _, err := pendingPods(f.c.podInformer.GetIndexer(), testNS, "app in (", now); err == nil {
		t.Fatal("a malformed selector gave no error")
	}
}

func TestADeletedScalerIsForgotten(t *testing.T) {
	f := newFixture(t, startEtcd(t))
	f.c.history.addRecommendation(testNS+"/gone", Recommendation{Time: time.Now(), Replicas: 3})
	f.c.metrics.desired.WithLabelValues(testNS, "gone").Set(3)
	f.c.metrics.throughput.WithLabelValues(testNS, "gone").Set(220)
	f.c.metrics.goodput.WithLabelValues(testNS, "gone").Set(165)
	if err := f.sync("gone"); err != nil {
		t.Fatal(err)
	}
	if recs, _ := f.c.history.get(testNS+"/gone", time.Now()); recs != nil {
		t.Errorf("history kept %v", recs)
	}
	for name, g := range map[string]*prometheus.GaugeVec{"desired-replicas": f.c.metrics.desired, "throughput": f.c.metrics.throughput, "goodput": f.c.metrics.goodput} {
		if n := testutil.CollectAndCount(g); n != 0 {
			t.Errorf("%d %s series left, want 0", n, name)
		}
	}
}

func TestAnUnreachableEtcdHoldsTheSizeAndSaysSo(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	f := newFixture(t, client, scaler("dark"))
	f.target("dark-workers", 2)
	f.c.cfg.EtcdTimeout = time.Second // a closed client fails only at the deadline
	client.Close()
	if err := f.sync("dark"); err == nil {
		t.Fatal("sync = nil, want the read's error so the key is retried")
	}
	es := f.stored("dark")
	wantCondition(t, es, v1alpha1.ScalingActive, metav1.ConditionFalse, ReasonFailedReadJob, "cannot read job team/dark's status from etcd")
	wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale, "")
	if n := f.targetReplicas("dark-workers"); n != 2 {
		t.Fatalf("target at %d, want held at 2", n)
	}
}

func TestAJobStoppedByTrainerCrashesIsAConditionAndAnEventOnEachPod(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "crashing", 4, worker{id: "crashing-workers-0", none: true}, worker{id: "crashing-workers-1", none: true})
	why := "every worker exits 1 before its first step, 3 generations in a row: EOFError: Ran out of input"
	stopJob(t, etcd, "crashing", why)
	f := newFixture(t, etcd, scaler("crashing"))
	f.target("crashing-workers", 2)
	f.cachePod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "crashing-workers-0", Namespace: testNS}})
	f.events.IncludeObject = true
	if err := f.sync("crashing"); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, f.stored("crashing"), v1alpha1.JobStopped, metav1.ConditionTrue, ReasonTrainerCrashes, why)
	ev := f.drainEvents()
	var pods, scalers int
	for _, e := range ev {
		switch {
		case !strings.HasPrefix(e, "Warning TrainerCrashes trainer crashes stopped job team/crashing: "+why):
		case strings.Contains(e, "kind=Pod"):
			pods++
		case strings.Contains(e, "kind=ElasticScaler"):
			scalers++
		}
	}
	if pods != 1 || scalers != 1 {
		t.Fatalf("events %q, want one TrainerCrashes on the scaler and one on the pod it has", ev)
	}
	if err := f.sync("crashing"); err != nil {
		t.Fatal(err)
	}
	if ev := f.drainEvents(); len(ev) != 0 {
		t.Fatalf("a sync of the same stop recorded %q again", ev)
	}
}
