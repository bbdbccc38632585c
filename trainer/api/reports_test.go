package api

import (
	"math"
	"strings"
	"testing"
)

func TestHeartbeatGNSMustBeFiniteAndNotNegative(t *testing.T) {
	for _, tt := range []struct {
		gns    *float64
		wantOK bool
	}{
		{nil, true}, {new(0.0), true}, {new(1536.5), true},
		{new(-1.0), false}, {new(math.NaN()), false}, {new(math.Inf(1)), false},
	} {
		err := Heartbeat{Step: 1, GNS: tt.gns}.Validate()
		if (err == nil) != tt.wantOK || (err != nil && !strings.Contains(err.Error(), "gns")) {
			t.Errorf("Validate with gns %v = %v, want ok %v", tt.gns, err, tt.wantOK)
		}
	}
}

func TestHeartbeatComputeAndWaitTimesMustBeInRange(t *testing.T) {
	for _, tt := range []struct {
		compute, wait float64
		want          string // "" when valid
	}{
		{0, 0, ""}, {0.2, 0.05, ""}, {86400, 0, ""},
		{-0.1, 0, "compute_time_s"}, {0, -1, "wait_time_s"},
		{math.NaN(), 0, "compute_time_s"}, {0, math.Inf(1), "wait_time_s"}, {86401, 0, "compute_time_s"},
	} {
		err := Heartbeat{Step: 1, ComputeTimeS: tt.compute, WaitTimeS: tt.wait}.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate with compute %g, wait %g = %v, want an error naming %q", tt.compute, tt.wait, err, tt.want)
		}
	}
}
