package autoscale

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

func TestRunSyncsFromTheInformersAndStopsWithItsContext(t *testing.T) {
	f := newFixture(t, startEtcd(t), scaler("live", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas = 2 }))
	f.target("live-workers", 1)
	rescaled := f.rescaled()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.c.Run(ctx) }()
	select {
	case <-rescaled:
	case err := <-done:
		t.Fatalf("Run returned %v before it synced", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the scaler was not synced within 20s of Run")
	}
	if !f.c.Ready() {
		t.Error("a running controller with synced caches is not ready")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil when its context ends", err)
	}
	if n := f.targetReplicas("live-workers"); n != 2 {
		t.Fatalf("target at %d, want 2", n)
	}
}

func TestTheMetricsTellTheDecisionAndTheRescale(t *testing.T) {
	f := newFixture(t, startEtcd(t), scaler("grow", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas = 3 }))
	f.target("grow-workers", 1)
	if err := f.sync("grow"); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP ringside_autoscale_desired_replicas The replicas an ElasticScaler last decided for its target.
# TYPE ringside_autoscale_desired_replicas gauge
ringside_autoscale_desired_replicas{name="grow",namespace="team"} 3
# HELP ringside_autoscale_scale_events_total Changes of a target's replicas the controller made, by direction (up or down).
# TYPE ringside_autoscale_scale_events_total counter
ringside_autoscale_scale_events_total{direction="down"} 0
ringside_autoscale_scale_events_total{direction="up"} 1
# HELP ringside_autoscale_is_leader 1 while this controller holds the leader lease and syncs, 0 while it stands by.
# TYPE ringside_autoscale_is_leader gauge
ringside_autoscale_is_leader 0
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want),
		"ringside_autoscale_desired_replicas", "ringside_autoscale_scale_events_total", "ringside_autoscale_is_leader"); err != nil {
		t.Fatal(err)
	}
}

// The throughput and goodput gauges are the status's averages at the
// job's current size once a sync measured it there; a job whose
// heartbeats are stale has none.
func TestTheMetricsTellTheThroughputAndGoodputAtTheCurrentSize(t *testing.T) {
	etcd := startEtcd(t)
	gns := 110.0
	seedJob(t, etcd, "steady", 4, worker{id: "w0", samplesPerSec: 100, gns: &gns}, worker{id: "w1", samplesPerSec: 120, gns: &gns})
	seedJob(t, etcd, "stale", 2, worker{id: "w0", samplesPerSec: 100}, worker{id: "w1", samplesPerSec: 90, age: time.Minute})
	// A reading at one worker (older than the heartbeats, so that they are
	// folded in) makes the batch at two less efficient per sample:
	// (gns + 55) / (gns + 110) = 0.75 at 55 samples per worker and step
	// (each worker's rate times its 0.5 s step).
	atOne := []v1alpha1.WorldSizeThroughput{{WorldSize: 1, SamplesPerSecond: 120, Goodput: 120, Observations: 3,
		LastObservedTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
	f := newFixture(t, etcd, scaler("steady", func(es *v1alpha1.ElasticScaler) { es.Status.Throughput = atOne }), scaler("stale"))
	for _, job := range []string{"steady", "stale"} {
		f.target(job+"-workers", 2)
		if err := f.sync(job); err != nil {
			t.Fatalf("%s: %v", job, err)
		}
	}
	want := `
# HELP ringside_autoscale_throughput_samples_per_second The job's throughput at its current world size, as an ElasticScaler's status averages it; absent while none is measured there recently.
# TYPE ringside_autoscale_throughput_samples_per_second gauge
ringside_autoscale_throughput_samples_per_second{name="steady",namespace="team"} 220
# HELP ringside_autoscale_goodput_samples_per_second The job's goodput at its current world size (throughput times the statistical efficiency of its batch), as an ElasticScaler's status holds it; absent while none is measured there recently.
# TYPE ringside_autoscale_goodput_samples_per_second gauge
ringside_autoscale_goodput_samples_per_second{name="steady",namespace="team"} 165
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want),
		"ringside_autoscale_throughput_samples_per_second", "ringside_autoscale_goodput_samples_per_second"); err != nil {
		t.Fatal(err)
	}
}

// leaseTimes are short, so that a hand-over takes about a second.
func leaseTimes(id string) LeaderElection {
	l := DefaultLeaderElection()
	l.Namespace, l.Identity = "ringside-system", id
	l.LeaseDuration, l.RenewDeadline, l.RetryPeriod = 2*time.Second, time.Second, 100*time.Millisecond
	return l
}

// campaign runs an elector for id on kube in the background; leading
// gets its run's context once it leads, and done its result.
type campaign struct {
	cancel  context.CancelFunc
	leading chan context.Context
	done    chan error
}

func campaignFor(kube *kubefake.Clientset, id string) *campaign {
	ctx, cancel := context.WithCancel(context.Background())
	c := &campaign{cancel: cancel, leading: make(chan context.Context, 1), done: make(chan error, 1)}
	l := leaseTimes(id)
	e := newElector(kube.CoordinationV1().Leases(l.Namespace), l, clock.RealClock{}, slog.New(slog.DiscardHandler), func(bool) {})
	go func() {
		c.done <- e.run(ctx, func(lctx context.Context) {
			c.leading <- lctx
			<-lctx.Done()
		})
	}()
	return c
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestOneReplicaLeadsAndTheStandbyTakesOver(t *testing.T) {
	kube := kubefake.NewClientset()
	// Once taken is set, another holder has the lease: reads show it,
	// and updates conflict.
	var taken atomic.Bool
	intruder, duration, now := "intruder", int32(60), metav1.NewMicroTime(time.Now())
	kube.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !taken.Load() {
			return false, nil, nil
		}
		return true, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ringside-system", Name: "ringside-controller", ResourceVersion: "99"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &intruder, LeaseDurationSeconds: &duration, RenewTime: &now, AcquireTime: &now},
		}, nil
	})
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !taken.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "ringside-controller", errors.New("taken"))
	})

	a := campaignFor(kube, "a")
	await(t, a.leading, "a to lead")
	b := campaignFor(kube, "b")
	select {
	case <-b.leading:
		t.Fatal("b leads while a holds the lease")
	case <-time.After(500 * time.Millisecond): // five of b's retries
	}

	a.cancel()
	if err := await(t, a.done, "a to stop"); err != nil {
		t.Fatalf("a stopped with %v, want nil: its context ended", err)
	}
	bctx := await(t, b.leading, "b to take over the released lease")

	// Another holder takes the lease from under b: b must stop syncing
	// and say so.
	taken.Store(true)
	await(t, bctx.Done(), "b's run to be stopped")
	if err := await(t, b.done, "b to stop"); !errors.Is(err, ErrLostLease) {
		t.Fatalf("b stopped with %v, want ErrLostLease", err)
	}
}

func TestHealthAndReadinessFollowTheLeaseAndTheCaches(t *testing.T) {
	f := newFixture(t, startEtcd(t))
	h := f.c.handler(f.reg, nil, nil)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a leader whose caches have not synced = %d, want 503", code)
	}
	f.c.onLeading(false)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz of a standby = %d, want 200", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `ringside_autoscale_syncs_total{result="success"} 0`) {
		t.Errorf("/metrics = %d:\n%s", code, body)
	}
}
