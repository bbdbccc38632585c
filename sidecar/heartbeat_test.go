package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
)

// gaugeValue reads an unlabelled gauge from g (0 when it is not there).
func gaugeValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	v, _ := metricValue(t, g, name)
	return v
}

// The throughput gauge is the rate the sidecar stores in etcd from the
// trainer's heartbeats, and reads 0 once the trainer's heartbeats stop.
func TestTheThroughputGaugeFollowsTheHeartbeatsAndReadsZeroOnceTheTrainerGoes(t *testing.T) {
	const timeout = 2 * time.Second
	srv := etcdtest.Start(t)
	a := sidecartest.Start(t, srv.Endpoints(), "throughput", "w0", func(c *sidecar.Config) { c.TrainerTimeout = timeout })
	c := newAPIClient(t, a.Socket)
	client := etcdtest.Client(t, srv)
	key := coordinator.DefaultConfig("default", "throughput").Prefix() + record.StatusDir + "w0"
	beat := func(samples int64) record.Status {
		t.Helper()
		body := fmt.Sprintf(`{"step":%d,"samples":%d,"step_time_s":0.05}`, samples/8, samples)
		if resp, b := c.do("POST", "/v1/heartbeat", body); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("heartbeat: %s %s", resp.Status, b)
		}
		var st record.Status
		eventually(t, fmt.Sprintf("the heartbeat of %d samples stored", samples), func() bool {
			resp, err := client.Get(context.Background(), key)
			if err != nil || len(resp.Kvs) == 0 {
				return false
			}
			return json.Unmarshal(resp.Kvs[0].Value, &st) == nil && st.Samples == samples
		})
		return st
	}

	beat(0)
	eventually(t, "the trainer attached", func() bool { return gaugeValue(t, a.Gatherer(), "ringside_api_trainer_attached") == 1 })
	st := beat(640)
	if !(st.SamplesPerSec > 0) {
		t.Fatalf("stored %+v, want a positive rate after 640 samples", st)
	}
	if got := gaugeValue(t, a.Gatherer(), "ringside_trainer_samples_per_second"); got != st.SamplesPerSec {
		t.Fatalf("ringside_trainer_samples_per_second = %g, want the stored rate %g", got, st.SamplesPerSec)
	}

	eventually(t, "the throughput gauge at 0 once the heartbeats stopped", func() bool {
		return gaugeValue(t, a.Gatherer(), "ringside_trainer_samples_per_second") == 0
	})
	if got := gaugeValue(t, a.Gatherer(), "ringside_api_trainer_attached"); got != 0 {
		t.Fatalf("ringside_api_trainer_attached = %g with the throughput at 0, want 0", got)
	}
}

// The status carries the median compute and wait times of the heartbeats
// since the previous status, so that a slow rank's compute shows however
// often its trainer reports, and one stalled step does not speak for all.
func TestTheStatusCarriesTheMedianComputeAndWaitSinceTheLastOne(t *testing.T) {
	srv := etcdtest.Start(t)
	// Long enough that the second and third heartbeats fall into one status.
	a := sidecartest.Start(t, srv.Endpoints(), "split", "w0", func(c *sidecar.Config) { c.StatusInterval = 3 * time.Second })
	c := newAPIClient(t, a.Socket)
	client := etcdtest.Client(t, srv)
	key := coordinator.DefaultConfig("default", "split").Prefix() + record.StatusDir + "w0"
	beat := func(step int, compute, wait float64) {
		t.Helper()
		body := fmt.Sprintf(`{"step":%d,"samples":%d,"step_time_s":%g,"compute_time_s":%g,"wait_time_s":%g}`, step, step, compute+wait, compute, wait)
		if resp, b := c.do("POST", "/v1/heartbeat", body); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("heartbeat: %s %s", resp.Status, b)
		}
	}
	stored := func(step int64) record.Status {
		t.Helper()
		var st record.Status
		eventually(t, fmt.Sprintf("the status of step %d stored", step), func() bool {
			resp, err := client.Get(context.Background(), key)
			if err != nil || len(resp.Kvs) == 0 {
				return false
			}
			return json.Unmarshal(resp.Kvs[0].Value, &st) == nil && st.Step == step
		})
		return st
	}
	beat(1, 0.1, 0.3)
	if st := stored(1); st.ComputeTimeS != 0.1 || st.WaitTimeS != 0.3 {
		t.Fatalf("first status %+v, want compute 0.1 and wait 0.3", st)
	}
	beat(2, 0.2, 0.1)
	beat(3, 3.5, 0.2) // a stalled step
	beat(4, 0.25, 0.1)
	st := stored(4)
	if st.ComputeTimeS != 0.25 || st.WaitTimeS != 0.1 {
		t.Fatalf("second status %+v, want the medians of steps 2 to 4: compute 0.25, wait 0.1", st)
	}
}

// metricValue reads an unlabelled gauge or counter from g; false when it
// is not there.
func metricValue(t *testing.T, g prometheus.Gatherer, name string) (float64, bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// The trainer's step, step time, generation and skipped steps reach the
// sidecar's /metrics from its heartbeats; the skipped steps are a counter
// that a restarted trainer (its count back at 0) does not take back.
func TestTrainerMetricsFollowTheHeartbeats(t *testing.T) {
	srv := etcdtest.Start(t)
	a := sidecartest.Start(t, srv.Endpoints(), "trainer-metrics", "w0")
	c := newAPIClient(t, a.Socket)
	for _, body := range []string{
		`{"step":5,"samples":40,"step_time_s":0.25,"generation":1,"skipped_steps":1}`,
		`{"step":9,"samples":72,"step_time_s":0.125,"generation":2,"skipped_steps":3}`,
		`{"step":10,"samples":80,"step_time_s":0.5,"skipped_steps":1}`, // a new process: 1 more
	} {
		if resp, b := c.do("POST", "/v1/heartbeat", body); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("heartbeat %s: %s %s", body, resp.Status, b)
		}
	}
	for name, want := range map[string]float64{
		"ringside_trainer_step":                10,
		"ringside_trainer_step_seconds":        0.5,
		"ringside_trainer_generation":          2, // the last heartbeat named none
		"ringside_trainer_skipped_steps_total": 4,
	} {
		if got, ok := metricValue(t, a.Gatherer(), name); !ok || got != want {
			t.Errorf("%s = %g (exported: %v), want %g", name, got, ok, want)
		}
	}
	if resp, b := c.do("POST", "/v1/heartbeat", `{"step":1,"samples":1,"step_time_s":0.1,"skipped_steps":-1}`); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "skipped_steps must not be negative") {
		t.Fatalf("a negative skipped_steps: %s %s, want 400 naming it", resp.Status, b)
	}
}
