package api

import (
	"errors"
	"fmt"
	"math"
)

// Heartbeat is a trainer's report after a step (POST /v1/heartbeat).
type Heartbeat struct {
	Step       int64   `json:"step"`
	Samples    int64   `json:"samples"`
	StepTimeS  float64 `json:"step_time_s"`
	Generation int64   `json:"generation,omitempty"`
	// GNS is the gradient noise scale the trainer measured (opt-in), in
	// samples: the batch size at which a step's gradient noise equals its
	// signal, Pollux's B_noise = tr(Σ)/|G|² from local against all-reduced
	// gradient norms. The autoscaler reads it for the job's goodput. Absent
	// when not measured (nil, so that a measured 0 is told apart).
	GNS *float64 `json:"gns,omitempty"`
}

// maxStepTimeS bounds a step's reported time at a day: a larger value is
// a mistake, not a step.
const maxStepTimeS = 86400

// Validate reports every problem with a heartbeat.
func (h Heartbeat) Validate() error {
	var errs []error
	if h.Step < 0 {
		errs = append(errs, fmt.Errorf("step must not be negative, got %d", h.Step))
	}
	if h.Samples < 0 {
		errs = append(errs, fmt.Errorf("samples must not be negative, got %d", h.Samples))
	}
	if h.StepTimeS < 0 || h.StepTimeS > maxStepTimeS {
		errs = append(errs, fmt.Errorf("step_time_s must be between 0 and %d, got %g", maxStepTimeS, h.StepTimeS))
	}
	if h.GNS != nil && (math.IsNaN(*h.GNS) || math.IsInf(*h.GNS, 0) || *h.GNS < 0) {
		errs = append(errs, fmt.Errorf("gns (the gradient noise scale) must be finite and not negative, got %g; leave it out when it is not measured", *h.GNS))
	}
	return errors.Join(errs...)
}

// FailureReport is a trainer's report that a collective failed because of
// a peer (POST /v1/failure).
type FailureReport struct {
	Peer  string `json:"peer"`
	Error string `json:"error,omitempty"`
}

// RestartReport is restart mode's report that the trainer crashed and is
// being restarted (POST /v1/restart; the body is optional).
type RestartReport struct {
	Error string `json:"error,omitempty"`
}
