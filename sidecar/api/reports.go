package api

import (
	"errors"
	"fmt"
)

// Heartbeat is a trainer's report after a step (POST /v1/heartbeat).
type Heartbeat struct {
	Step       int64   `json:"step"`
	Samples    int64   `json:"samples"`
	StepTimeS  float64 `json:"step_time_s"`
	Generation int64   `json:"generation,omitempty"`
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
