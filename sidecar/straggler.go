package sidecar

import (
	"fmt"

	"github.com/ringside/ringside/coordinator/record"
)

// straggling takes the leader's finding about this member (nil: none):
// the metric shows it, and a finding that asks for a replacement drains
// the member as a preemption would, so that no step is lost and a new
// member can take its place elsewhere. Only a finding of the generation
// this process trained in drains it: one left from before a restart of
// the pod under the same id does not.
func (a *Agent) straggling(s *record.Straggler) {
	g := a.metrics.straggler.WithLabelValues(a.cfg.MemberID)
	if s == nil {
		g.Set(0)
		return
	}
	g.Set(1)
	a.log.Warn("named a straggler by the leader", "compute_time_s", s.ComputeTimeS, "median_compute_time_s", s.MedianComputeTimeS,
		"since_step", s.SinceStep, "step", s.Step, "action", s.Action, "generation", s.Generation)
	if s.Action != record.ActionReplace {
		return
	}
	a.mu.Lock()
	first := a.firstGen
	a.mu.Unlock()
	if first == 0 || s.Generation < first {
		return
	}
	a.requestDrain(fmt.Sprintf("straggler: computes %.2fx the ring's median since step %d; replaced", s.Ratio(), s.SinceStep))
}
