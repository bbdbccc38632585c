package autoscale

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/internal/promcheck"
)

// The controller's /metrics (the handler and registry Run serves) keeps
// Prometheus' conventions (promtool check metrics). A running controller
// that measures a job and rescales its target gives the labelled metrics,
// the workqueue's among them, their samples: a vector without any is not
// in the exposition, and so not checked.
func TestTheControllersMetricsPassPromtool(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "lint", 1, worker{id: "w0", samplesPerSec: 100})
	f := newFixture(t, etcd, scaler("lint", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas = 2 }))
	f.target("lint-workers", 1)
	rescaled := f.rescaled()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	select {
	case <-rescaled:
	case err := <-done:
		done <- err // for the deferred wait
		t.Fatalf("Run returned %v before it synced", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the scaler was not synced within 20s of Run")
	}

	rec := httptest.NewRecorder()
	apiServer := newProbe(func(context.Context) error { return nil }, time.Second, clock.RealClock{}, f.reg, f.c.log)
	f.c.handler(f.reg, nil, apiServer).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d: %s", rec.Code, rec.Body)
	}
	for _, name := range []string{"ringside_autoscale_throughput_samples_per_second", "ringside_autoscale_goodput_samples_per_second"} {
		if !strings.Contains(rec.Body.String(), name+"{") {
			t.Errorf("/metrics has no sample of %s to check", name)
		}
	}
	promcheck.Check(t, rec.Body.Bytes())
}
