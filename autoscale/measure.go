package autoscale

import (
	"time"

	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/coordinator/record"
)

// jobState is what one snapshot of the job tells the policy.
type jobState struct {
	// Workers and Draining are Input's.
	Workers, Draining int32
	// HaveStatus and StatusAge are Input's.
	HaveStatus bool
	StatusAge  time.Duration
	// Measurement is the job's throughput now, nil when the snapshot
	// cannot tell it honestly (see measure).
	Measurement *Measurement
}

// readJobState reads the policy's view of the job from a snapshot s.
// Heartbeats older than maxAge measure nothing.
func readJobState(s jobstatus.Snapshot, maxAge time.Duration) jobState {
	var st jobState
	newest := time.Duration(-1)
	for _, m := range s.Members {
		if m.State == record.StateDraining {
			st.Draining++
		}
		if m.Rank >= 0 && m.State == record.StateActive {
			st.Workers++
		}
		if age, ok := heartbeatAge(m); ok && m.Rank >= 0 && (newest < 0 || age < newest) {
			newest = age
		}
	}
	if s.Generation > 0 && newest >= 0 {
		st.HaveStatus, st.StatusAge = true, newest
	}
	st.Measurement = measure(s, maxAge)
	return st
}

// measure returns the job's throughput at its current world size, or nil
// unless every member of the generation is active and has reported, within
// maxAge, from the current generation: a reading taken mid-resize, with a
// member draining, gone or still reporting its old generation's rate,
// would file one size's throughput under another.
//
// The world size is the generation's members (pods, as the target's
// replicas count them), not its ranks. The measurement's time is the
// oldest heartbeat's, in whole seconds (as the status stores it), so that
// a reading is folded in once: only when all members reported since.
func measure(s jobstatus.Snapshot, maxAge time.Duration) *Measurement {
	if s.Generation <= 0 || s.Paused {
		return nil
	}
	var (
		m               = Measurement{}
		oldest          time.Duration
		gnsSum, batches float64
		gnsN            int
	)
	for _, mb := range s.Members {
		if mb.Rank < 0 {
			continue
		}
		age, ok := heartbeatAge(mb)
		if mb.State != record.StateActive || !ok || age > maxAge || mb.HeartbeatGeneration != s.Generation {
			return nil
		}
		oldest = max(oldest, age)
		m.WorldSize++
		m.SamplesPerSec += mb.SamplesPerSec
		batches += mb.SamplesPerSec * mb.StepTimeP50S
		if mb.GNS != nil {
			gnsSum += *mb.GNS
			gnsN++
		}
	}
	if m.WorldSize == 0 {
		return nil
	}
	m.Time = s.Time.Add(-oldest).Truncate(time.Second)
	// A worker's samples per step: its rate times its median step time.
	m.BatchPerWorker = batches / float64(m.WorldSize)
	if gnsN > 0 {
		gns := gnsSum / float64(gnsN)
		m.GNS = &gns
	}
	return &m
}

func heartbeatAge(m jobstatus.Member) (time.Duration, bool) {
	if m.LastHeartbeatAgeS == nil {
		return 0, false
	}
	return time.Duration(*m.LastHeartbeatAgeS * float64(time.Second)), true
}
