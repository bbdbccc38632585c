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
