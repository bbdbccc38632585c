package api

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ringside/ringside/coordinator/record"
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
	// ComputeTimeS and WaitTimeS split the step's time into the trainer's
	// own work (forward, backward, optimizer) and its wait in the
	// collectives for its peers, in seconds: a data-parallel step lasts as
	// long on every rank, but only a slow rank computes for longer, while
	// the ranks that wait for it wait for longer. The leader compares the
	// compute times to name a straggler. 0 (left out) when the trainer
	// does not measure them.
	ComputeTimeS float64 `json:"compute_time_s,omitempty"`
	WaitTimeS    float64 `json:"wait_time_s,omitempty"`
	// SkippedSteps counts the steps this trainer process rolled back
	// instead of committing (non-finite loss or gradients), since it
	// started; absent: none (or an older client).
	SkippedSteps int64 `json:"skipped_steps,omitempty"`
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
	for _, f := range []struct {
		name string
		v    float64
	}{{"compute_time_s", h.ComputeTimeS}, {"wait_time_s", h.WaitTimeS}} {
		if !(f.v >= 0 && f.v <= maxStepTimeS) { // NaN fails both
			errs = append(errs, fmt.Errorf("%s must be between 0 and %d, got %g", f.name, maxStepTimeS, f.v))
		}
	}
	if h.SkippedSteps < 0 {
		errs = append(errs, fmt.Errorf("skipped_steps must not be negative, got %d", h.SkippedSteps))
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

// RestartReport is restart mode's report that the trainer exited on its
// own with a failure (POST /v1/restart), sent at once: the job's leader
// decides whether the job restarts, whether the crash counts against its
// restart budget, or whether the job stops. The body is optional, and
// every field but Error too (an older client sends no more).
type RestartReport struct {
	Error string `json:"error,omitempty"`
	// Generation is the generation the trainer ran in; 0: the sidecar's
	// current one.
	Generation int64 `json:"generation,omitempty"`
	// ExitCode is the trainer's exit code, 128+N when signal N ended it,
	// and Signal then the signal's name ("SIGKILL").
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// RanS is how long the trainer ran, in seconds.
	RanS float64 `json:"ran_s,omitempty"`
	// FirstStep: the trainer reached its first training step (exec: it
	// ran longer than --first-step-time).
	FirstStep bool `json:"first_step,omitempty"`
	// Stderr holds the trainer's last lines on its standard error, oldest
	// first (at most record.MaxCrashLines of record.MaxCrashLineLen bytes).
	Stderr []string `json:"stderr,omitempty"`
	// MaxRestarts is the job's restart budget and CrashLoop how many
	// generations in a row of trainers failing before their first step
	// stop the job (0: never), as exec was given them (--max-restarts,
	// --crash-loop); absent: DefaultMaxRestarts and DefaultCrashLoop.
	MaxRestarts *int `json:"max_restarts,omitempty"`
	CrashLoop   *int `json:"crash_loop,omitempty"`
}

// FinishReport is restart mode's report that the trainer's command exited
// 0 (POST /v1/finish): its work is done, and the job is finishing, so
// that the members leaving as their commands end restart nobody. The
// body is optional.
type FinishReport struct {
	// Generation is the generation the command ran in; 0: the sidecar's
	// current one.
	Generation int64 `json:"generation,omitempty"`
	// RanS is how long the command ran, in seconds.
	RanS float64 `json:"ran_s,omitempty"`
}

// Validate reports every problem with a finish report.
func (r FinishReport) Validate() error {
	return r.Finish(1, time.Time{}).Validate()
}

// Finish is the record of the report for generation gen (the report's
// own when it names one), at t.
func (r FinishReport) Finish(gen int64, t time.Time) record.Crash {
	if r.Generation != 0 {
		gen = r.Generation
	}
	return record.Crash{Generation: gen, RanS: r.RanS, Time: t, Finished: true}
}

// The job's crash policy when a report does not name it: torchrun's
// restarts as `ringside exec` counts them by default.
const (
	// DefaultMaxRestarts: three restarts after trainer crashes, then the
	// job stops.
	DefaultMaxRestarts = 3
	// DefaultCrashLoop: three generations in a row whose trainers fail
	// before their first step stop the job, whatever restarts are left:
	// the same failure three times is no longer bad luck.
	DefaultCrashLoop = 3
)

// Validate reports every problem with a restart report.
func (r RestartReport) Validate() error {
	var errs []error
	if r.Generation < 0 {
		errs = append(errs, fmt.Errorf("generation must not be negative, got %d", r.Generation))
	}
	if r.ExitCode != nil && *r.ExitCode < 1 {
		errs = append(errs, fmt.Errorf("exit_code must be a failure's, 1-255, got %d", *r.ExitCode))
	}
	if err := r.Crash(1, time.Time{}).Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Crash is the record of the report for generation gen (the report's own
// when it names one), at t. Error is cut to record.MaxTextLen: an older
// client's text is taken whatever its length.
func (r RestartReport) Crash(gen int64, t time.Time) record.Crash {
	if r.Generation != 0 {
		gen = r.Generation
	}
	c := record.Crash{Generation: gen, Signal: r.Signal, RanS: r.RanS, FirstStep: r.FirstStep, Stderr: r.Stderr,
		Error: record.TrimText(r.Error, record.MaxTextLen), MaxRestarts: DefaultMaxRestarts, CrashLoop: DefaultCrashLoop, Time: t}
	if r.ExitCode != nil {
		c.ExitCode = *r.ExitCode
	}
	if r.MaxRestarts != nil {
		c.MaxRestarts = *r.MaxRestarts
	}
	if r.CrashLoop != nil {
		c.CrashLoop = *r.CrashLoop
	}
	return c
}
