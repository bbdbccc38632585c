package record

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Status is what a member's sidecar stores under status/<id> from its
// trainer's heartbeats, for the autoscaler, straggler checks and the
// status view.
type Status struct {
	Step          int64     `json:"step"`
	Samples       int64     `json:"samples"`
	SamplesPerSec float64   `json:"samples_per_s"`
	StepTimeS     float64   `json:"step_time_s"`
	StepTimeP50S  float64   `json:"step_time_p50_s"`
	StepTimeP90S  float64   `json:"step_time_p90_s"`
	Generation    int64     `json:"generation"`
	Time          time.Time `json:"time"`
	// GNS is the newest gradient noise scale the trainer reported
	// (api.Heartbeat.GNS), for the autoscaler's goodput; nil while it
	// reports none.
	GNS *float64 `json:"gns,omitempty"`
	// ComputeTimeS and WaitTimeS are the medians, over the steps reported
	// since the member's previous status, of its trainer's compute time
	// and wait in the collectives per step (api.Heartbeat); 0 when its
	// trainer does not report them. The leader compares the compute
	// times across members to find a straggler.
	ComputeTimeS float64 `json:"compute_time_s,omitempty"`
	WaitTimeS    float64 `json:"wait_time_s,omitempty"`
}

// DecodeStatus decodes a status/<id> value and checks its bounds: no
// negative count, rate or time.
func DecodeStatus(value []byte) (Status, error) {
	var st Status
	if err := json.Unmarshal(value, &st); err != nil {
		return Status{}, fmt.Errorf("malformed status: %w", err)
	}
	if err := st.Validate(); err != nil {
		return Status{}, fmt.Errorf("malformed status: %w", err)
	}
	return st, nil
}

// Validate reports the first field of st out of its bounds.
func (st Status) Validate() error {
	switch {
	case st.Step < 0, st.Samples < 0:
		return fmt.Errorf("step %d or samples %d is negative", st.Step, st.Samples)
	case st.Generation < 0 || st.Generation > MaxGeneration:
		return fmt.Errorf("generation %d is out of range", st.Generation)
	}
	for _, f := range []float64{st.SamplesPerSec, st.StepTimeS, st.StepTimeP50S, st.StepTimeP90S, st.ComputeTimeS, st.WaitTimeS} {
		if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("a rate or step time (%v) is negative or not finite", f)
		}
	}
	return nil
}
