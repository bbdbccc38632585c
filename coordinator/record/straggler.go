package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// StragglerAction is what the job does about a straggler.
type StragglerAction string

const (
	// ActionReport names the straggler (status, metric, Kubernetes
	// Event) and leaves it in the ring.
	ActionReport StragglerAction = "report"
	// ActionReplace drains the straggler out of the ring as a preempted
	// member drains (no step lost), so that a new member can take its
	// place elsewhere; the job trains at its world size less the
	// straggler's slots meanwhile.
	ActionReplace StragglerAction = "replace"
)

// ParseStragglerAction reads a policy's name: report or replace.
func ParseStragglerAction(s string) (StragglerAction, error) {
	switch a := StragglerAction(s); a {
	case ActionReport, ActionReplace:
		return a, nil
	}
	return "", fmt.Errorf("straggler policy %q: want %s or %s", s, ActionReport, ActionReplace)
}

// Straggler is the leader's finding that a member's trainer computes
// slower than the job's others, stored under stragglers/<id> by the
// leader (fenced by its election key, with no lease: a new leader takes
// the findings over) until the member computes at the job's pace again
// or leaves the ring.
type Straggler struct {
	// Generation is the generation the member was found slow in.
	Generation int64 `json:"generation"`
	// SinceStep is the first step it was slow at, Step the job's step
	// when it was named.
	SinceStep int64 `json:"since_step"`
	Step      int64 `json:"step"`
	// ComputeTimeS is the member's compute time per step when named, and
	// MedianComputeTimeS the median over the ring's members then.
	ComputeTimeS       float64 `json:"compute_time_s"`
	MedianComputeTimeS float64 `json:"median_compute_time_s"`
	// Action is what the leader's policy does about it (replace only
	// where Replaceable).
	Action StragglerAction `json:"action"`
	// Replaceable: the job stays at or above its min world size without
	// the member, so a controller may replace it whatever the leader's
	// own policy.
	Replaceable bool `json:"replaceable,omitempty"`
	// Node is the member's node (MemberInfo.Node), for the controller to
	// keep its replacement off it; "" outside Kubernetes.
	Node string `json:"node,omitempty"`
	// Leader named it, at Time.
	Leader string    `json:"leader"`
	Time   time.Time `json:"time"`
}

// Ratio is how many times the median compute time the member took.
func (s Straggler) Ratio() float64 {
	if s.MedianComputeTimeS <= 0 {
		return 0
	}
	return s.ComputeTimeS / s.MedianComputeTimeS
}

// StragglerKey returns the key, relative to the job's Prefix, of member
// id's straggler finding.
func StragglerKey(id string) string { return StragglersDir + id }

// DecodeStraggler decodes and checks the value of a stragglers/<id> key
// (relative to the job's Prefix, or absolute) and returns the member's id
// with it.
func DecodeStraggler(key string, value []byte) (id string, s Straggler, err error) {
	rel := key
	if i := indexJobKey(key); i >= 0 {
		rel = key[i:]
	}
	id, ok := strings.CutPrefix(rel, StragglersDir)
	if !ok || ValidateID(id) != nil {
		return "", Straggler{}, fmt.Errorf("malformed straggler key %q: want %s<id>", key, StragglersDir)
	}
	if err := json.Unmarshal(value, &s); err != nil {
		return "", Straggler{}, fmt.Errorf("malformed straggler %s: %w", id, err)
	}
	if err := s.Validate(); err != nil {
		return "", Straggler{}, fmt.Errorf("malformed straggler %s: %w", id, err)
	}
	return id, s, nil
}

// Validate reports every field of s out of its bounds.
func (s Straggler) Validate() error {
	var errs []error
	if s.Generation < 1 || s.Generation > MaxGeneration {
		errs = append(errs, fmt.Errorf("generation %d is out of range", s.Generation))
	}
	if s.SinceStep < 0 || s.Step < s.SinceStep {
		errs = append(errs, fmt.Errorf("steps %d to %d are not a range of steps", s.SinceStep, s.Step))
	}
	for _, f := range []float64{s.ComputeTimeS, s.MedianComputeTimeS} {
		if !(f >= 0 && f <= math.MaxInt32) { // NaN fails both
			errs = append(errs, fmt.Errorf("a compute time (%v) is negative or not finite", f))
			break
		}
	}
	if _, err := ParseStragglerAction(string(s.Action)); err != nil {
		errs = append(errs, err)
	}
	if err := validText("node", s.Node, MaxTextLen); err != nil {
		errs = append(errs, err)
	}
	if s.Leader != "" && ValidateID(s.Leader) != nil {
		errs = append(errs, fmt.Errorf("leader %q is not a member id", s.Leader))
	}
	return errors.Join(errs...)
}
