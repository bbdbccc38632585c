package autoscale

import (
	"context"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

func TestDrainGraceIsTheP99TimesTheFactorWithinItsBounds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		seconds   []float64
		factor    float64
		max       time.Duration
		p99       float64
		wantGrace int32
	}{
		{"one drain, rounded up", []float64{2.2}, 2, time.Hour, 2.2, 5},
		{"the slowest of fewer than 100", []float64{1, 7, 3}, 1.5, time.Hour, 7, 11},
		{"a quick drain still gets a second", []float64{0.01}, 2, time.Hour, 0.01, 1},
		{"held at the max", []float64{400}, 2, 10 * time.Minute, 400, 600},
	} {
		p99, grace := drainGrace(tc.seconds, tc.factor, tc.max)
		if p99 != tc.p99 || grace != tc.wantGrace {
			t.Errorf("%s: p99 %v, grace %d; want %v, %d", tc.name, p99, grace, tc.p99, tc.wantGrace)
		}
	}
}

// The job's recorded drains reach the status, where the webhook reads
// the grace it gives the job's new workers.
func TestTheStatusCarriesTheMeasuredDrainGrace(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "drains", 1, worker{id: "w0", samplesPerSec: 100})
	f := newFixture(t, etcd, scaler("drains"))
	f.target("drains-workers", 1)
	if err := f.sync("drains"); err != nil {
		t.Fatal(err)
	}
	if d := f.stored("drains").Status.Drain; d != nil {
		t.Fatalf("drain status %+v before any drain, want none", d)
	}
	if _, err := etcd.Put(context.Background(), record.Prefix(testNS, "drains")+record.DrainsKey, `{"seconds":[1.25,4.5,2]}`); err != nil {
		t.Fatal(err)
	}
	if err := f.sync("drains"); err != nil {
		t.Fatal(err)
	}
	d := f.stored("drains").Status.Drain
	if d == nil || d.Samples != 3 || d.P99Seconds != 4.5 || d.GracePeriodSeconds != 9 {
		t.Fatalf("drain status %+v, want 3 samples, p99 4.5 s, grace 9 s (factor 2)", d)
	}
}
